// Package regfile opens the command's input files, refusing at once
// anything that is not a regular file: opening a FIFO blocks until a writer
// appears (and reading it may never end), a device such as /dev/zero never
// ends, and a directory cannot be read as data.
package regfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Open opens path for reading after checking that it is a regular file:
// stat first, so that a FIFO is never opened, then open without blocking
// and check the opened file again in case the path was replaced in
// between. Errors start with path: "q.npy: not a regular file (a named
// pipe)", "q.npy: no such file or directory".
func Open(path string) (*os.File, fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, named(path, err)
	}
	if err := regular(path, st); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, named(path, err)
	}
	st, err = f.Stat()
	if err == nil {
		err = regular(path, st)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// Stat returns the FileInfo of path, or an error (as Open's) unless it is
// a regular file.
func Stat(path string) (fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, named(path, err)
	}
	return st, regular(path, st)
}

// ReadFile reads the whole regular file path: as many bytes as its size
// when opened (a file that grows meanwhile is read up to that size).
func ReadFile(path string) ([]byte, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, named(path, err)
	}
	return b, nil
}

// regular returns an error naming path unless st is a regular file.
func regular(path string, st fs.FileInfo) error {
	if st.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("%s: not a regular file (%s)", path, Kind(st.Mode()))
}

// Kind names the type of a non-regular file.
func Kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "an irregular file"
}

// named prefixes err with path, dropping the operation and path of an
// *fs.PathError.
func named(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s: %w", path, err)
}
