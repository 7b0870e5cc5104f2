package npy

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// tempName returns the hidden name of a temporary file ("tmp") or backup
// ("bak") for the destination path, owned by this process:
// DIR/.BASE.KIND-PID-RANDOM.
func tempName(path, kind string) string {
	dir, base := filepath.Split(path)
	return filepath.Join(dir, "."+base+"."+kind+"-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(rand.Uint64(), 36))
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

// parseTempName parses a name made by tempName: the destination's base
// name, the kind and the process id.
func parseTempName(name string) (base, kind string, pid int, ok bool) {
	rest, ok := strings.CutPrefix(name, ".")
	if !ok {
		return "", "", 0, false
	}
	i := max(strings.LastIndex(rest, ".tmp-"), strings.LastIndex(rest, ".bak-"))
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

// removeStale removes from dir the temporary files and backups of
// processes that no longer exist. A stale backup whose destination is
// missing (the process died after moving the old file aside) is renamed
// back instead. Errors are ignored: this is housekeeping.
func removeStale(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, ent := range ents {
		base, kind, pid, ok := parseTempName(ent.Name())
		if !ok || !ent.Type().IsRegular() && ent.Type()&fs.ModeSymlink == 0 || processExists(pid) {
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
