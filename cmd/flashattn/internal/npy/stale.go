package npy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The files a WriteAll keeps beside its destinations are hidden and named
// DIR/.BASE.KIND-PID-RANDOM: temporary files (KIND tmp) and backups (bak)
// after their destination BASE, and the journal (BASE journalBase) in its
// three states, uncommitted (jnl), committed (cmt) and undoing (abt).
const journalBase = "flashattn-commit"

var kinds = []string{"tmp", "bak", "jnl", "cmt", "abt"}

// newID returns a fresh PID-RANDOM suffix for this process.
func newID() string {
	return strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(rand.Uint64(), 36)
}

// tempName returns the hidden name of a temporary file ("tmp") or backup
// ("bak") for the destination path, owned by this process:
// DIR/.BASE.KIND-PID-RANDOM.
func tempName(path, kind string) string {
	dir, base := filepath.Split(path)
	return filepath.Join(dir, "."+base+"."+kind+"-"+newID())
}

// createName calls create with fresh names from tempName until one does
// not exist yet, and returns it.
func createName(path, kind string, create func(name string) error) (string, error) {
	var err error
	for range 16 {
		name := tempName(path, kind)
		if err = create(name); !errors.Is(err, fs.ErrExist) {
			return name, err
		}
	}
	return "", err
}

// parseTempName parses a name made by tempName or a journal's name: the
// destination's base name, the kind and the process id.
func parseTempName(name string) (base, kind string, pid int, ok bool) {
	rest, ok := strings.CutPrefix(name, ".")
	if !ok {
		return "", "", 0, false
	}
	i := -1
	for _, k := range kinds {
		i = max(i, strings.LastIndex(rest, "."+k+"-"))
	}
	if i <= 0 {
		return "", "", 0, false
	}
	base, kind = rest[:i], rest[i+1:i+4]
	ids := strings.Split(rest[i+5:], "-")
	if len(ids) != 2 || ids[1] == "" || strings.Trim(ids[1], "0123456789abcdefghijklmnopqrstuvwxyz") != "" {
		return "", "", 0, false
	}
	pid, err := strconv.Atoi(ids[0])
	if err != nil || pid <= 0 || strconv.Itoa(pid) != ids[0] {
		return "", "", 0, false
	}
	return base, kind, pid, true
}

// journal is what a WriteAll records before its commit point: every
// destination with its temporary file and, if it existed, its backup (base
// names in the journal's directory).
type journal struct {
	Version int            `json:"version"`
	Entries []journalEntry `json:"entries"`
}

type journalEntry struct {
	Dest string `json:"dest"`
	Tmp  string `json:"tmp"`
	Bak  string `json:"bak,omitempty"` // "": the destination did not exist
}

const journalVersion = 1

func (j journal) encode() ([]byte, error) {
	b, err := json.Marshal(j)
	return append(b, '\n'), err
}

// decodeJournal parses a journal of the process pid and checks that every
// name it holds is a plain name in its directory and, for the temporary
// files and backups, one of that process's names for its destination, so
// that replaying it only moves files that the write itself made.
func decodeJournal(b []byte, pid int) (journal, error) {
	var j journal
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return j, err
	}
	if j.Version != journalVersion || len(j.Entries) == 0 {
		return j, fmt.Errorf("version %d with %d entries", j.Version, len(j.Entries))
	}
	plain := func(n string) bool {
		return n != "" && n != "." && n != ".." && !strings.ContainsAny(n, `/\`) && filepath.Base(n) == n
	}
	for _, e := range j.Entries {
		if !plain(e.Dest) {
			return j, fmt.Errorf("destination %q", e.Dest)
		}
		for _, x := range []struct{ name, kind string }{{e.Tmp, "tmp"}, {e.Bak, "bak"}} {
			if x.name == "" && x.kind == "bak" {
				continue
			}
			base, kind, p, ok := parseTempName(x.name)
			if !plain(x.name) || !ok || base != e.Dest || kind != x.kind || p != pid {
				return j, fmt.Errorf("%s name %q for %q", x.kind, x.name, e.Dest)
			}
		}
	}
	return j, nil
}

// Recover makes dir consistent after writes into it by processes that no
// longer exist (killed, or the machine stopped): a committed write is
// finished (its new files replace the destinations), a write that was
// being undone is undone (the destinations are restored), and the
// temporary files, backups and uncommitted journals they left are removed.
// It is called by WriteAll for its directory; a command calls it too for a
// directory it is about to use. A journal that cannot be completed is an
// error naming it, and the files of its process are kept; WriteAll then
// refuses to write into dir, since finishing that journal later would
// overwrite the newer files. Files of processes that exist are left alone.
func Recover(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // nothing to recover; a missing dir is reported by the caller
	}
	var errs []error
	keep := map[int]bool{} // processes whose journal could not be completed
	for _, ent := range ents {
		_, kind, pid, ok := parseTempName(ent.Name())
		if !ok || kind != "cmt" && kind != "abt" || !ent.Type().IsRegular() || processExists(pid) {
			continue
		}
		name := filepath.Join(dir, ent.Name())
		if err := replay(dir, name, kind, pid); err != nil {
			keep[pid] = true
			errs = append(errs, fmt.Errorf("%s: cannot complete the write that a killed process (pid %d) left in %s: %v", name, pid, dir, err))
		}
	}
	removeStale(dir, keep)
	return errors.Join(errs...)
}

// replay completes the journal at path: roll forward for a committed
// write (cmt), back for one being undone (abt). Every step can be
// repeated, so that a replay that is itself stopped is completed by the
// next.
func replay(dir, path, kind string, pid int) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return unwrapPath(err)
	}
	j, err := decodeJournal(b, pid)
	if err != nil {
		return fmt.Errorf("not a valid journal (%v)", err)
	}
	at := func(n string) string { return filepath.Join(dir, n) }
	exists := func(n string) bool { _, err := os.Lstat(at(n)); return err == nil }
	gone := func(err error) bool { return err == nil || errors.Is(err, fs.ErrNotExist) }
	for _, e := range j.Entries {
		switch {
		case kind == "cmt" && exists(e.Tmp):
			// Not yet renamed (its destination is the old file, or was
			// moved aside to the backup): the new file goes in place.
			if err := os.Rename(at(e.Tmp), at(e.Dest)); err != nil {
				return unwrapPath(err)
			}
		case kind == "abt" && e.Bak != "" && exists(e.Bak):
			// The backup holds the old file (a hard link, or the old file
			// moved aside): back in place. (Renaming a hard link over the
			// other name of the same file does nothing; it is removed below.)
			if err := os.Rename(at(e.Bak), at(e.Dest)); err != nil {
				return unwrapPath(err)
			}
		case kind == "abt" && e.Bak == "" && !exists(e.Tmp):
			// A new destination that was renamed into place: removed.
			if err := os.Remove(at(e.Dest)); !gone(err) {
				return unwrapPath(err)
			}
		}
	}
	syncDir(dir)
	for _, e := range j.Entries {
		for _, n := range []string{e.Tmp, e.Bak} {
			if n == "" {
				continue
			}
			if err := os.Remove(at(n)); !gone(err) {
				return unwrapPath(err)
			}
		}
	}
	syncDir(dir)
	if err := os.Remove(path); !gone(err) {
		return unwrapPath(err)
	}
	syncDir(dir)
	return nil
}

// removeStale removes from dir the temporary files, backups and
// uncommitted journals of processes that no longer exist, except those of
// the processes in keep. A stale backup whose destination is missing (left
// by versions that moved the old file aside without a journal) is renamed
// back instead. Errors are ignored: this is housekeeping.
func removeStale(dir string, keep map[int]bool) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, ent := range ents {
		base, kind, pid, ok := parseTempName(ent.Name())
		if !ok || kind == "cmt" || kind == "abt" || keep[pid] ||
			!ent.Type().IsRegular() && ent.Type()&fs.ModeSymlink == 0 || processExists(pid) {
			continue
		}
		name := filepath.Join(dir, ent.Name())
		if kind == "bak" {
			dest := filepath.Join(dir, base)
			if _, err := os.Lstat(dest); errors.Is(err, fs.ErrNotExist) {
				os.Rename(name, dest)
				continue
			}
		}
		os.Remove(name)
	}
}

// processExists reports whether the process pid may still be writing;
// tests replace it to treat this process as a killed one.
var processExists = processAlive
