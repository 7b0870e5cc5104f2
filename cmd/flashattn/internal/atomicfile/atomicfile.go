// Package atomicfile writes a whole file or nothing: the bytes go to a
// temporary file in the destination's directory, are synced, and the file is
// renamed over the destination. A reader sees the old file or the new one,
// never a partial one.
package atomicfile

import (
	"io"
	"os"
	"path/filepath"
)

// Write writes what w produces to path, atomically. The file gets mode 0644.
// On error the destination is left as it was and the temporary file is
// removed.
func Write(path string, w io.WriterTo) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, err = w.WriteTo(tmp)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
