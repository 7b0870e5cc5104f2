package regfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestNonRegularRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{fifo, fifo + ": not a regular file (a named pipe)"},
		{dir, dir + ": not a regular file (a directory)"},
		{"/dev/zero", "/dev/zero: not a regular file (a character device)"},
		{filepath.Join(dir, "missing"), filepath.Join(dir, "missing") + ": no such file or directory"},
	} {
		if _, err := ReadFile(c.path); err == nil || err.Error() != c.want {
			t.Errorf("ReadFile(%s) = %v, want %q", c.path, err, c.want)
		}
		if _, err := Stat(c.path); err == nil || err.Error() != c.want {
			t.Errorf("Stat(%s) = %v, want %q", c.path, err, c.want)
		}
	}
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(file); err != nil || string(b) != "hello" {
		t.Errorf("ReadFile = %q, %v", b, err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(link); err != nil || !strings.HasPrefix(string(b), "hello") {
		t.Errorf("a symbolic link to a regular file: %q, %v", b, err)
	}
}
