package atomicfile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.txt")
	for _, want := range []string{"first", "second, longer"} {
		if err := Write(path, bytes.NewReader([]byte(want))); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o644 {
			t.Fatalf("mode %v, %v; want 0644", fi.Mode(), err)
		}
	}
	assertOnly(t, dir, "out.txt")
}

// failingWriter writes a few bytes, then fails.
type failingWriter struct{}

var errWrite = errors.New("disk on fire")

func (failingWriter) WriteTo(w io.Writer) (int64, error) {
	n, _ := w.Write([]byte("partial"))
	return int64(n), errWrite
}

func TestWriteErrorKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.txt")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, failingWriter{}); !errors.Is(err, errWrite) {
		t.Fatalf("err %v, want %v", err, errWrite)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "old" {
		t.Fatalf("read %q, %v; want the old file", got, err)
	}
	assertOnly(t, dir, "out.txt")
}

func TestWriteMissingDir(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "out.txt")
	if err := Write(path, bytes.NewReader(nil)); err == nil {
		t.Fatal("no error for a missing directory")
	}
}

// assertOnly fails unless dir holds exactly the named entry (no temporary
// file left behind).
func assertOnly(t *testing.T, dir, name string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != name {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("directory holds %v, want only %s", names, name)
	}
}
