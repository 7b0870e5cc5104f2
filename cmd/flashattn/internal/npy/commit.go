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
	// (a hard link beside it) until every rename has succeeded.
	StageBackup
	// StageRename: a temporary file is about to be renamed over its
	// destination.
	StageRename
	// StageRestore: after a failure, a destination that was already
	// replaced is about to be restored from its backup (or removed, if it
	// did not exist before).
	StageRestore
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

// WriteAll writes several arrays, keyed by path, so that either all of them
// replace their destinations or every destination is left byte-identical
// to what it was (present or absent). An Array with F16 set is written as
// '<f2', one with I32 set as '<i4', one with U8 set as '|u1', otherwise as
// '<f4'.
//
// It first checks every array and every destination (a destination that is
// a directory or another non-regular file is an error saying so), then
// writes and syncs each array to a temporary file beside its destination,
// keeps each existing destination as a backup (a hard link, or, where the
// file system has none, a rename just before the replacement), and renames
// the temporary files into place. If any step fails, or ctx is canceled
// before the last rename, the destinations already replaced are restored
// from their backups and every temporary file is removed; the error names
// the destination and the real cause (for a canceled ctx, its cause). Only
// after all renames succeeded are the backups removed.
//
// The temporary files and backups are hidden files named after the
// destination and this process's id (".out.npy.tmp-PID-RANDOM",
// ".out.npy.bak-PID-RANDOM"). Before writing, WriteAll removes such files
// left in the destination directories by processes that no longer exist
// (killed before they could clean up); a stale backup whose destination is
// missing is renamed back into place instead.
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
	dirs := map[string]bool{}
	tx := &txn{opt: opt, files: files, dirs: dirs}
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
		tx.entries = append(tx.entries, e)
		dirs[filepath.Dir(p)] = true
	}
	for d := range dirs {
		removeStale(d)
	}
	if err := tx.run(ctx); err != nil {
		return err
	}
	for d := range dirs {
		syncDir(d)
	}
	return nil
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
	dirs    map[string]bool // the destinations' directories
}

func (tx *txn) run(ctx context.Context) error {
	for _, e := range tx.entries {
		if err := tx.writeTemp(ctx, e); err != nil {
			return tx.rollback(named(e.path, err))
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
			return tx.rollback(err)
		}
		bak, err := createName(e.path, "bak", func(name string) error { return link(e.path, name) })
		if err == nil {
			e.bak, e.linked = bak, true
		}
		// Without hard links the old file is moved aside just before it
		// is replaced (see rename).
	}
	for _, e := range tx.entries {
		if err := tx.step(ctx, StageRename, e.path); err != nil {
			return tx.rollback(err)
		}
		if err := e.rename(); err != nil {
			return tx.rollback(named(e.path, err))
		}
	}
	for _, e := range tx.entries {
		if e.bak != "" {
			os.Remove(e.bak)
		}
	}
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

// rename puts the temporary file in place, first moving the old file aside
// if no hard-link backup could be made.
func (e *entry) rename() error {
	if e.existed && !e.linked {
		bak, err := createName(e.path, "bak", func(name string) error {
			if _, err := os.Lstat(name); err == nil {
				return fs.ErrExist
			}
			return os.Rename(e.path, name)
		})
		if err != nil {
			return err
		}
		e.bak, e.moved = bak, true
	}
	if err := os.Rename(e.tmp, e.path); err != nil {
		return err
	}
	e.renamed = true
	return nil
}

// rollback undoes everything after the failure cause: destinations are
// restored (newest first), temporary files and unneeded backups removed.
// A backup that could not be restored is kept, and named in the error.
func (tx *txn) rollback(cause error) error {
	errs := []error{cause}
	// Restoring must happen even when the context that interrupted the
	// write is canceled.
	ctx := context.Background()
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
			if e.existed {
				errs = append(errs, fmt.Errorf("restoring %s failed (%v): its earlier content is in %s", e.path, unwrapPath(err), e.bak))
			} else {
				errs = append(errs, fmt.Errorf("removing the new %s failed (%v)", e.path, unwrapPath(err)))
			}
			e.bak = ""
			continue
		}
		e.bak, e.renamed, e.moved = "", false, false
	}
	for _, e := range tx.entries {
		if e.tmp != "" && !e.renamed {
			os.Remove(e.tmp)
		}
		if e.bak != "" && e.linked && !e.renamed {
			os.Remove(e.bak)
		}
	}
	for d := range tx.dirs {
		syncDir(d)
	}
	if len(errs) == 1 {
		return cause
	}
	return &rollbackError{errs}
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
