package npy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// Stage is a step of WriteAll, reported to WriteOptions.Hook.
type Stage int

const (
	// StageWrite: the temporary file of a destination has been created and
	// its data is about to be written.
	StageWrite Stage = iota
	// StageBackup: an existing destination is about to be kept as a backup
	// (a hard link beside it) until the write is complete.
	StageBackup
	// StageRename: a temporary file is about to be renamed over its
	// destination (after the commit point).
	StageRename
	// StageRestore: after a failure or an interruption past the commit
	// point, a destination that was already replaced is about to be
	// restored from its backup (or removed, if it did not exist before).
	StageRestore
	// StageCommit: every temporary file and backup is in place and the
	// journal is written; the commit point (the rename of the journal) is
	// next. The hook's path is the destinations' directory.
	StageCommit
)

func (s Stage) String() string {
	switch s {
	case StageWrite:
		return "write"
	case StageBackup:
		return "backup"
	case StageRename:
		return "rename"
	case StageRestore:
		return "restore"
	case StageCommit:
		return "commit"
	}
	return fmt.Sprintf("Stage(%d)", int(s))
}

// WriteOptions adjust WriteAll.
type WriteOptions struct {
	// Hook, if not nil, is called before each step with WriteAll's context
	// and the destination the step concerns; if it returns an error, the
	// step fails with that error. It lets tests inject a failure or an
	// interruption at every point of the write.
	Hook func(ctx context.Context, stage Stage, path string) error

	// Critical, if not nil, is called with true just before the commit
	// point and with false when WriteAll returns after it. In between the
	// destinations are being replaced (or, after a failure or a canceled
	// ctx, restored) and an exit of the process would leave them mixed
	// until the next WriteAll or Recover in their directory: a caller that
	// exits on a signal must not exit in between (see cmd/flashattn's
	// signal handling). The section takes a few renames.
	Critical func(enter bool)

	// link makes hard links (os.Link when nil); tests replace it to
	// exercise file systems without hard links.
	link func(oldname, newname string) error
}

func (o WriteOptions) hook(ctx context.Context, s Stage, path string) error {
	if o.Hook == nil {
		return nil
	}
	return o.Hook(ctx, s, path)
}

// WriteAll writes several arrays, keyed by path, into one directory so
// that either all of them replace their destinations or every destination
// is left byte-identical to what it was (present or absent), whatever
// fails and however the process is stopped. An Array with F16 set is
// written as '<f2', one with I32 set as '<i4', one with U8 set as '|u1',
// otherwise as '<f4'.
//
// It first completes or undoes what a write that was killed left in the
// directory (see Recover), checks every array and every destination (a
// destination that is a directory or another non-regular file is an error
// saying so, and all must be in one directory), then:
//
//  1. writes and syncs each array to a temporary file beside its
//     destination, and keeps each existing destination as a backup (a hard
//     link; where the file system has none, the old file is moved aside
//     just before it is replaced);
//  2. writes and syncs a journal naming the destinations, their temporary
//     files and backups (".flashattn-commit.jnl-PID-RANDOM");
//  3. commits: renames the journal to ".flashattn-commit.cmt-PID-RANDOM".
//     Before this point no destination has changed; from it on the new
//     files are the outcome, unless WriteAll itself undoes the write;
//  4. renames the temporary files over their destinations, removes the
//     journal (the write is then final) and the backups.
//
// If a step before the commit fails, or ctx is canceled before it, the
// temporary files, backups and journal are removed and no destination was
// touched. If a rename fails, or ctx is canceled, after the commit and
// before the last rename, WriteAll renames the journal to
// ".flashattn-commit.abt-PID-RANDOM" (undoing) and restores every replaced
// destination from its backup. The error names the destination and the
// real cause (for a canceled ctx, its cause).
//
// A process killed at any point leaves a state that the next WriteAll (or
// Recover) in the directory makes consistent: without a journal, or with
// an uncommitted one, it removes the temporaries and backups (the
// destinations are the old ones); with a committed journal it finishes the
// renames (the new ones); with an undoing journal it finishes the
// restores (the old ones). Every one of these steps can be repeated, so a
// recovery that is itself killed is completed by the next one.
//
// The temporary files and backups are hidden files named after the
// destination and this process's id (".out.npy.tmp-PID-RANDOM",
// ".out.npy.bak-PID-RANDOM"); files of processes that still exist are left
// alone.
func WriteAll(ctx context.Context, files map[string]Array, opt WriteOptions) error {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if _, err := checkArray(files[p]); err != nil {
			return named(p, err)
		}
	}
	// Recover first: what it completes or undoes changes the destinations.
	recovered := map[string]bool{}
	for _, p := range paths {
		if d := filepath.Dir(p); !recovered[d] {
			recovered[d] = true
			if err := Recover(d); err != nil {
				return err
			}
		}
	}
	tx := &txn{opt: opt, files: files}
	for _, p := range paths {
		e, err := prepare(p)
		if err != nil {
			return err
		}
		for _, f := range tx.entries {
			if f.base == e.base && os.SameFile(f.dir, e.dir) {
				return fmt.Errorf("%s and %s are the same file", f.path, p)
			}
		}
		if len(tx.entries) > 0 && !os.SameFile(tx.entries[0].dir, e.dir) {
			return fmt.Errorf("%s and %s are in different directories: one all-or-nothing write goes into one directory", tx.entries[0].path, p)
		}
		tx.entries = append(tx.entries, e)
	}
	if len(tx.entries) == 0 {
		return nil
	}
	tx.dir = filepath.Dir(tx.entries[0].path)
	return tx.run(ctx)
}

// entry is one destination of a WriteAll.
type entry struct {
	path, tmp, bak string
	dir            fs.FileInfo // the directory, to detect two names of one file
	base           string
	existed        bool // the destination existed before
	linked         bool // bak is a hard link to the old destination
	moved          bool // the old destination was renamed to bak
	renamed        bool // tmp has been renamed over the destination
}

// prepare checks a destination: its directory must exist, and it must not
// exist or be a regular file (or a symbolic link, which is replaced).
func prepare(path string) (*entry, error) {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return nil, named(dir, err)
	case !st.IsDir():
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	e := &entry{path: path, dir: st, base: filepath.Base(path)}
	st, err = os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return e, nil
	case err != nil:
		return nil, named(path, err)
	case st.IsDir():
		return nil, fmt.Errorf("%s is a directory", path)
	case !st.Mode().IsRegular() && st.Mode()&fs.ModeSymlink == 0:
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, kind(st.Mode()))
	}
	e.existed = true
	return e, nil
}

// txn is one all-or-nothing write.
type txn struct {
	opt     WriteOptions
	files   map[string]Array
	entries []*entry
	dir     string // the destinations' directory
	id      string // PID-RANDOM of the journal
	jnl     string // the journal's path while it is written (uncommitted)
}

// journalPath is the path of this write's journal in state kind (jnl,
// cmt or abt).
func (tx *txn) journalPath(kind string) string {
	return filepath.Join(tx.dir, "."+journalBase+"."+kind+"-"+tx.id)
}

func (tx *txn) run(ctx context.Context) error {
	for _, e := range tx.entries {
		if err := tx.writeTemp(ctx, e); err != nil {
			return tx.discard(named(e.path, err))
		}
	}
	link := tx.opt.link
	if link == nil {
		link = os.Link
	}
	for _, e := range tx.entries {
		if !e.existed {
			continue
		}
		if err := tx.step(ctx, StageBackup, e.path); err != nil {
			return tx.discard(err)
		}
		bak, err := createName(e.path, "bak", func(name string) error { return link(e.path, name) })
		if err == nil {
			e.bak, e.linked = bak, true
			continue
		}
		// Without hard links the old file is moved aside just before it
		// is replaced (see rename), under a name chosen now for the
		// journal.
		e.bak = tempName(e.path, "bak")
	}
	if err := tx.writeJournal(); err != nil {
		return tx.discard(fmt.Errorf("cannot write the commit journal in %s: %v", tx.dir, unwrapPath(err)))
	}
	if err := tx.step(ctx, StageCommit, tx.dir); err != nil {
		return tx.discard(err)
	}
	if tx.opt.Critical != nil {
		tx.opt.Critical(true)
		defer tx.opt.Critical(false)
	}
	if err := stop(ctx); err != nil {
		return tx.discard(err)
	}
	// The commit point.
	if err := os.Rename(tx.jnl, tx.journalPath("cmt")); err != nil {
		return tx.discard(fmt.Errorf("cannot commit the write into %s: %v", tx.dir, unwrapPath(err)))
	}
	tx.jnl = ""
	syncDir(tx.dir)
	for _, e := range tx.entries {
		if err := tx.step(ctx, StageRename, e.path); err != nil {
			return tx.abort(err)
		}
		if err := e.rename(); err != nil {
			return tx.abort(named(e.path, err))
		}
	}
	syncDir(tx.dir)
	// The write is final once the journal is gone; what is left is
	// housekeeping (a backup left here is removed by the next write).
	os.Remove(tx.journalPath("cmt"))
	for _, e := range tx.entries {
		if e.bak != "" {
			os.Remove(e.bak)
		}
	}
	syncDir(tx.dir)
	return nil
}

// step runs the hook before stage s of the destination path, checking for
// cancellation before and after it. A hook error is named after path.
func (tx *txn) step(ctx context.Context, s Stage, path string) error {
	if err := stop(ctx); err != nil {
		return err
	}
	if err := tx.opt.hook(ctx, s, path); err != nil {
		return named(path, err)
	}
	return stop(ctx)
}

// stop returns the cause of ctx's cancellation, if it was canceled.
func stop(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// writeTemp writes the array of e to a new temporary file beside it, syncs
// and closes it.
func (tx *txn) writeTemp(ctx context.Context, e *entry) (err error) {
	if err := stop(ctx); err != nil {
		return err
	}
	var f *os.File
	tmp, err := createName(e.path, "tmp", func(name string) error {
		var err error
		f, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		return err
	})
	if err != nil {
		return fmt.Errorf("cannot create a file in %s: %w", filepath.Dir(e.path), unwrapPath(err))
	}
	e.tmp = tmp
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if err := tx.opt.hook(ctx, StageWrite, e.path); err != nil {
		return err
	}
	bw := newBufWriter(f)
	if err := encodeContext(ctx, bw, tx.files[e.path]); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Sync()
}

// writeJournal makes the temporary files and backups durable and writes
// the uncommitted journal that names them, synced.
func (tx *txn) writeJournal() error {
	syncDir(tx.dir)
	j := journal{Version: journalVersion}
	for _, e := range tx.entries {
		je := journalEntry{Dest: e.base, Tmp: filepath.Base(e.tmp)}
		if e.existed {
			je.Bak = filepath.Base(e.bak)
		}
		j.Entries = append(j.Entries, je)
	}
	b, err := j.encode()
	if err != nil {
		return err
	}
	var f *os.File
	tx.id = newID()
	for range 16 {
		tx.jnl = tx.journalPath("jnl")
		if f, err = os.OpenFile(tx.jnl, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); !errors.Is(err, fs.ErrExist) {
			break
		}
		tx.id = newID()
	}
	if err != nil {
		tx.jnl = ""
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// rename puts the temporary file in place, first moving the old file aside
// if no hard-link backup could be made.
func (e *entry) rename() error {
	if e.existed && !e.linked {
		if _, err := os.Lstat(e.bak); err == nil {
			return fmt.Errorf("backup name %s is taken", e.bak)
		}
		if err := os.Rename(e.path, e.bak); err != nil {
			return err
		}
		e.moved = true
	}
	if err := os.Rename(e.tmp, e.path); err != nil {
		return err
	}
	e.renamed = true
	return nil
}

// discard undoes a write stopped before its commit point: no destination
// was touched; the temporary files, the backups and the journal are
// removed. A process that exits in the middle of it only leaves files that
// the next write removes.
func (tx *txn) discard(cause error) error {
	for _, e := range tx.entries {
		if e.tmp != "" {
			os.Remove(e.tmp)
		}
		if e.linked {
			os.Remove(e.bak)
		}
	}
	if tx.jnl != "" {
		os.Remove(tx.jnl)
	}
	syncDir(tx.dir)
	return cause
}

// abort undoes a write stopped after its commit point: it records the
// decision by renaming the journal to its undoing name, then restores the
// destinations already replaced (newest first) and removes the temporary
// files, the backups and the journal. A restore that fails keeps its
// backup, named in the error, and the journal, so that the next write into
// the directory completes the restore.
func (tx *txn) abort(cause error) error {
	cmt, abt := tx.journalPath("cmt"), tx.journalPath("abt")
	if err := os.Rename(cmt, abt); err != nil {
		return tx.forward(cause, err)
	}
	syncDir(tx.dir)
	errs := []error{cause}
	// Restoring must happen even when the context that interrupted the
	// write is canceled.
	ctx := context.Background()
	failed := false
	for i := len(tx.entries) - 1; i >= 0; i-- {
		e := tx.entries[i]
		if !e.renamed && !e.moved {
			continue
		}
		err := tx.opt.hook(ctx, StageRestore, e.path)
		if err == nil {
			switch {
			case e.existed:
				err = os.Rename(e.bak, e.path)
			default:
				err = os.Remove(e.path)
			}
		}
		if err != nil {
			failed = true
			if e.existed {
				errs = append(errs, fmt.Errorf("restoring %s failed (%v): its earlier content is in %s", e.path, unwrapPath(err), e.bak))
			} else {
				errs = append(errs, fmt.Errorf("removing the new %s failed (%v)", e.path, unwrapPath(err)))
			}
			continue
		}
		e.bak, e.renamed, e.moved = "", false, false
	}
	syncDir(tx.dir)
	// What no destination needs any more goes; the backups of failed
	// restores stay, for the next write.
	for _, e := range tx.entries {
		if e.tmp != "" && !e.renamed {
			os.Remove(e.tmp)
		}
		if e.bak != "" && e.linked && !e.renamed {
			os.Remove(e.bak)
		}
	}
	if failed {
		errs = append(errs, fmt.Errorf("the next write into %s completes the restore", tx.dir))
		syncDir(tx.dir)
		return &rollbackError{errs}
	}
	os.Remove(abt)
	syncDir(tx.dir)
	return cause
}

// forward finishes a committed write that could not be undone (its
// journal could not be renamed to record the decision): the new files are
// then the outcome, and the error says so.
func (tx *txn) forward(cause, undo error) error {
	for _, e := range tx.entries {
		if e.renamed {
			continue
		}
		if err := e.rename(); err != nil {
			return &rollbackError{[]error{cause, fmt.Errorf("undoing the write failed (%v) and so did finishing it (%v): the next write into %s completes it",
				unwrapPath(undo), unwrapPath(err), tx.dir)}}
		}
	}
	syncDir(tx.dir)
	os.Remove(tx.journalPath("cmt"))
	for _, e := range tx.entries {
		if e.bak != "" {
			os.Remove(e.bak)
		}
	}
	return &rollbackError{[]error{cause, fmt.Errorf("undoing the write failed (%v): the new files are in place", unwrapPath(undo))}}
}

// rollbackError is a failure whose rollback failed too: one line, the
// cause first.
type rollbackError struct{ errs []error }

func (e *rollbackError) Error() string {
	s := e.errs[0].Error()
	for _, x := range e.errs[1:] {
		s += "; " + x.Error()
	}
	return s
}

func (e *rollbackError) Unwrap() []error { return e.errs }

// syncDir makes renames in dir durable; errors are ignored because not
// every platform can sync a directory.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
