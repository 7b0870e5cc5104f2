package npy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

var errInjected = errors.New("injected failure")

// TestWriteAllFailurePoints injects a failure before every step of WriteAll
// (writing each temporary file, backing up each existing destination,
// renaming each one), with and without hard links, and checks that the
// directory is byte-identical afterwards and the error names the
// destination and the cause.
func TestWriteAllFailurePoints(t *testing.T) {
	names := []string{"dk.npy", "dq.npy", "dv.npy", "lse.npy", "out.npy"}
	for _, links := range []bool{true, false} {
		for _, stage := range []Stage{StageWrite, StageBackup, StageRename} {
			for _, name := range names {
				t.Run(fmt.Sprintf("links=%v/%v/%s", links, stage, name), func(t *testing.T) {
					dir := t.TempDir()
					// dk, dq, out exist from an earlier run; dv and lse do not.
					old := outputs(dir, 1)
					delete(old, filepath.Join(dir, "dv.npy"))
					delete(old, filepath.Join(dir, "lse.npy"))
					if err := WriteFiles(old); err != nil {
						t.Fatal(err)
					}
					before := snapshot(t, dir)
					target := filepath.Join(dir, name)
					hit := false
					opt := WriteOptions{Hook: func(_ context.Context, s Stage, p string) error {
						if s == stage && p == target {
							hit = true
							return errInjected
						}
						return nil
					}}
					if !links {
						opt.link = func(string, string) error { return &os.LinkError{Op: "link", Err: syscall.EPERM} }
					}
					err := WriteAll(context.Background(), outputs(dir, 2), opt)
					existed := old[target].F32 != nil
					if stage == StageBackup && !existed {
						// No backup step for a new file.
						if hit || err != nil {
							t.Fatalf("hit %v, err %v", hit, err)
						}
						return
					}
					if !hit || !errors.Is(err, errInjected) || err.Error() != target+": "+errInjected.Error() {
						t.Fatalf("hit %v, err = %v", hit, err)
					}
					sameSnapshot(t, snapshot(t, dir), before)
				})
			}
		}
	}
}

// A failed restore keeps the backup and names it; the rest is restored,
// and the journal left behind lets the next write complete the restore.
func TestWriteAllRestoreFails(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFiles(outputs(dir, 1)); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	dq, lse := filepath.Join(dir, "dq.npy"), filepath.Join(dir, "lse.npy")
	err := WriteAll(context.Background(), outputs(dir, 2), WriteOptions{Hook: func(_ context.Context, s Stage, p string) error {
		if s == StageRename && p == lse || s == StageRestore && p == dq {
			return errInjected
		}
		return nil
	}})
	prefix := lse + ": injected failure; restoring " + dq + " failed (injected failure): its earlier content is in "
	suffix := "; the next write into " + dir + " completes the restore"
	if err == nil || !strings.HasPrefix(err.Error(), prefix) || !strings.HasSuffix(err.Error(), suffix) {
		t.Fatalf("err = %v", err)
	}
	bak := strings.TrimSuffix(strings.TrimPrefix(err.Error(), prefix), suffix)
	got := snapshot(t, dir)
	if got[filepath.Base(bak)] != before["dq.npy"] {
		t.Errorf("backup %s does not hold the old dq.npy", bak)
	}
	if got["dq.npy"] == before["dq.npy"] {
		t.Errorf("dq.npy was restored although the hook failed")
	}
	var journals []string
	for n := range got {
		if _, kind, _, ok := parseTempName(n); ok && kind == "abt" {
			journals = append(journals, n)
		}
	}
	if len(journals) != 1 || len(got) != len(before)+2 {
		t.Fatalf("left %d undoing journals; directory %v", len(journals), keys(got))
	}
	// The next write (this process plays a killed one) restores dq.npy
	// and removes the backup and the journal before its own work.
	asDead(t)
	if err := Recover(dir); err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, snapshot(t, dir), before)
}

// asDead makes this process's leftovers look like those of a killed one
// (processExists says no for its id) until the test ends.
func asDead(t *testing.T) {
	self := os.Getpid()
	processExists = func(pid int) bool { return pid != self && processAlive(pid) }
	t.Cleanup(func() { processExists = processAlive })
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// copyDir copies the regular files of dir into a new directory: what a
// process killed at that moment leaves on disk.
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	dst := t.TempDir()
	for name, content := range snapshot(t, dir) {
		if err := os.WriteFile(filepath.Join(dst, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// A process killed at any step of WriteAll (the directory as it is at
// each hook, before the step, including every restore of an undo) leaves
// a state that Recover turns into the old files (before the commit point,
// or while undoing) or the new ones (after it), with nothing else left,
// with and without hard links; a second Recover changes nothing.
func TestWriteAllKilledAnywhere(t *testing.T) {
	names := []string{"dk.npy", "dq.npy", "dv.npy", "lse.npy", "out.npy"}
	newDir := t.TempDir()
	if err := WriteFiles(outputs(newDir, 2)); err != nil {
		t.Fatal(err)
	}
	newState := snapshot(t, newDir)
	for _, links := range []bool{true, false} {
		// fail: "" lets the write succeed; a name makes its rename fail,
		// so that the write is undone.
		for _, fail := range append([]string{""}, names...) {
			dir := t.TempDir()
			old := outputs(dir, 1)
			delete(old, filepath.Join(dir, "lse.npy")) // a new destination too
			if err := WriteFiles(old); err != nil {
				t.Fatal(err)
			}
			oldState := snapshot(t, dir)
			type point struct {
				what  string
				state string // "old" or "new": what Recover must give
				snap  string
			}
			var points []point
			opt := WriteOptions{Hook: func(_ context.Context, s Stage, p string) error {
				want := "old"
				if s == StageRename {
					want = "new"
				}
				points = append(points, point{fmt.Sprintf("%v %s", s, filepath.Base(p)), want, copyDir(t, dir)})
				if s == StageRename && fail != "" && filepath.Base(p) == fail {
					return errInjected
				}
				return nil
			}}
			if !links {
				opt.link = func(string, string) error { return &os.LinkError{Op: "link", Err: syscall.EPERM} }
			}
			err := WriteAll(context.Background(), outputs(dir, 2), opt)
			if (err != nil) != (fail != "") {
				t.Fatalf("links=%v fail=%q: err = %v", links, fail, err)
			}
			asDead(t)
			for _, pt := range points {
				if err := Recover(pt.snap); err != nil {
					t.Fatalf("links=%v fail=%q, killed before %s: %v", links, fail, pt.what, err)
				}
				got := snapshot(t, pt.snap)
				want := oldState
				if pt.state == "new" {
					want = newState
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("links=%v fail=%q, killed before %s: Recover gave %v, want the %s files", links, fail, pt.what, keys(got), pt.state)
				}
				if err := Recover(pt.snap); err != nil || !reflect.DeepEqual(snapshot(t, pt.snap), got) {
					t.Errorf("links=%v fail=%q, killed before %s: a second Recover changed the directory (%v)", links, fail, pt.what, err)
				}
			}
			processExists = processAlive
		}
	}
}

// A recovery that is itself killed is completed by the next one: replay
// each journal with one of its steps already done.
func TestRecoverRepeatable(t *testing.T) {
	for _, kind := range []string{"cmt", "abt"} {
		dir := t.TempDir()
		if err := WriteFiles(outputs(dir, 1)); err != nil {
			t.Fatal(err)
		}
		oldState := snapshot(t, dir)
		var snap string
		err := WriteAll(context.Background(), outputs(dir, 2), WriteOptions{Hook: func(_ context.Context, s Stage, p string) error {
			if kind == "cmt" && s == StageRename && filepath.Base(p) == "dv.npy" ||
				kind == "abt" && s == StageRestore && filepath.Base(p) == "dq.npy" {
				snap = copyDir(t, dir)
			}
			if s == StageRename && filepath.Base(p) == "out.npy" && kind == "abt" {
				return errInjected
			}
			return nil
		}})
		if (err != nil) != (kind == "abt") || snap == "" {
			t.Fatalf("%s: err = %v, snapshot %q", kind, err, snap)
		}
		want := snapshot(t, dir) // the outcome of the write in this process
		if kind == "abt" && !reflect.DeepEqual(want, oldState) {
			t.Fatalf("the undone write changed the directory")
		}
		asDead(t)
		// Replay only the first entry's step by hand, then Recover.
		var jpath string
		for n := range snapshot(t, snap) {
			if _, k, _, ok := parseTempName(n); ok && k == kind {
				jpath = filepath.Join(snap, n)
			}
		}
		b, err := os.ReadFile(jpath)
		if err != nil {
			t.Fatal(err)
		}
		j, err := decodeJournal(b, os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		e := j.Entries[len(j.Entries)-1]
		if kind == "cmt" {
			os.Rename(filepath.Join(snap, e.Tmp), filepath.Join(snap, e.Dest))
		} else {
			os.Rename(filepath.Join(snap, e.Bak), filepath.Join(snap, e.Dest))
		}
		if err := Recover(snap); err != nil {
			t.Fatal(err)
		}
		if got := snapshot(t, snap); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: after a partial replay, Recover gave %v", kind, keys(got))
		}
		processExists = processAlive
	}
}

// A journal that cannot be read is an error naming it; its process's
// files stay, and WriteAll refuses to write into the directory.
func TestRecoverBadJournal(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFiles(outputs(dir, 1)); err != nil {
		t.Fatal(err)
	}
	dead := deadPID(t)
	bad := filepath.Join(dir, fmt.Sprintf(".flashattn-commit.cmt-%d-x1", dead))
	tmp := filepath.Join(dir, fmt.Sprintf(".out.npy.tmp-%d-x2", dead))
	for _, c := range []string{"{not json", `{"version":1,"entries":[{"dest":"../x","tmp":".x.tmp-1-a"}]}`,
		fmt.Sprintf(`{"version":1,"entries":[{"dest":"out.npy","tmp":".other.tmp-%d-a"}]}`, dead)} {
		if err := os.WriteFile(bad, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(tmp, []byte("junk"), 0o644); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, dir)
		err := WriteFiles(outputs(dir, 2))
		if err == nil || !strings.Contains(err.Error(), bad+": cannot complete the write") {
			t.Errorf("%s: err = %v", c, err)
		}
		sameSnapshot(t, snapshot(t, dir), before)
	}
}

// Critical brackets the commit point and the renames: entered once when
// the write gets there, left when it returns; never for a write stopped
// before it.
func TestWriteAllCritical(t *testing.T) {
	for _, c := range []struct {
		stage Stage
		name  string
		calls string
	}{{StageWrite, "dq.npy", ""}, {StageCommit, "", ""}, {StageRename, "dv.npy", "in out "}, {-1, "", "in out "}} {
		dir := t.TempDir()
		var calls string
		inside := false
		err := WriteAll(context.Background(), outputs(dir, 2), WriteOptions{
			Critical: func(enter bool) {
				inside = enter
				calls += map[bool]string{true: "in ", false: "out "}[enter]
			},
			Hook: func(_ context.Context, s Stage, p string) error {
				if (s == StageRename || s == StageRestore) != inside {
					t.Errorf("%v %s: inside the critical section = %v", s, p, inside)
				}
				if s == c.stage && (c.name == "" || filepath.Base(p) == c.name) {
					return errInjected
				}
				return nil
			},
		})
		if (err != nil) != (c.stage >= 0) || calls != c.calls {
			t.Errorf("%v %s: err %v, Critical calls %q, want %q", c.stage, c.name, err, calls, c.calls)
		}
	}
}

// Canceling the context (as a signal does) at any point before the last
// rename leaves the directory as it was and returns the cancel cause.
func TestWriteAllCanceled(t *testing.T) {
	cause := errors.New("interrupted by test")
	for _, stage := range []Stage{StageWrite, StageBackup, StageRename} {
		for _, name := range []string{"dk.npy", "lse.npy", "out.npy"} {
			dir := t.TempDir()
			if err := WriteFiles(outputs(dir, 1)); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, dir)
			ctx, cancel := context.WithCancelCause(context.Background())
			// A large array, so that a cancel during the write of its data
			// is seen between chunks.
			files := outputs(dir, 2)
			files[filepath.Join(dir, "out.npy")] = Array{Shape: []int{1 << 20}, F32: make([]float32, 1<<20)}
			err := WriteAll(ctx, files, WriteOptions{Hook: func(_ context.Context, s Stage, p string) error {
				if s == stage && p == filepath.Join(dir, name) {
					cancel(cause)
				}
				return nil
			}})
			if !errors.Is(err, cause) {
				t.Errorf("%v %s: err = %v", stage, name, err)
			}
			sameSnapshot(t, snapshot(t, dir), before)
		}
	}
}

// Destinations that cannot be replaced are refused before anything is
// written, with the real cause.
func TestWriteAllBadDestinations(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFiles(outputs(dir, 1)); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.npy")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "afile")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	before := snapshot(t, dir)
	a := Array{Shape: []int{1}, F32: []float32{1}}
	for _, c := range []struct {
		files map[string]Array
		want  string
	}{
		{map[string]Array{fifo: a, filepath.Join(dir, "out.npy"): a}, fifo + " is not a regular file (a named pipe)"},
		{map[string]Array{filepath.Join(dir, "nodir", "x.npy"): a, filepath.Join(dir, "out.npy"): a}, filepath.Join(dir, "nodir") + ": no such file or directory"},
		{map[string]Array{filepath.Join(file, "x.npy"): a}, file + " is not a directory"},
		{map[string]Array{filepath.Join(dir, "out.npy"): a, "out.npy": a}, " are the same file"},
		{map[string]Array{filepath.Join(dir, "out.npy"): a, filepath.Join(dir, "link", "out.npy"): a}, " are the same file"},
		{map[string]Array{filepath.Join(dir, "out.npy"): {Shape: []int{2}, F32: []float32{1}}}, "out.npy: shape [2] has 2 elements, data has 1"},
	} {
		err := WriteAll(context.Background(), c.files, WriteOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
		sameSnapshot(t, snapshot(t, dir), before)
	}
}

// A directory where no file can be created: the error says so and names
// the directory; old files stay.
func TestWriteAllReadOnlyDir(t *testing.T) {
	if os.Geteuid() == 0 {
		// Permissions do not stop root: inject the same error instead.
		dir := t.TempDir()
		err := WriteAll(context.Background(), outputs(dir, 1), WriteOptions{Hook: func(_ context.Context, s Stage, p string) error {
			if s == StageWrite && filepath.Base(p) == "lse.npy" {
				return os.ErrPermission
			}
			return nil
		}})
		if !errors.Is(err, os.ErrPermission) || len(snapshot(t, dir)) != 0 {
			t.Fatalf("err = %v, dir %v", err, snapshot(t, dir))
		}
		return
	}
	dir := t.TempDir()
	if err := WriteFiles(outputs(dir, 1)); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	err := WriteFiles(outputs(dir, 2))
	if err == nil || !strings.Contains(err.Error(), "cannot create a file in "+dir+": permission denied") {
		t.Fatalf("err = %v", err)
	}
	sameSnapshot(t, snapshot(t, dir), before)
}

// deadPID returns the id of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// Temporary files and backups of dead processes are removed (a backup
// whose destination is missing is put back); those of live processes, and
// files of other naming, are left alone.
func TestWriteAllRemovesStale(t *testing.T) {
	dir := t.TempDir()
	dead, self := deadPID(t), os.Getpid()
	put := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stale := []string{
		fmt.Sprintf(".out.npy.tmp-%d-abc123", dead),
		fmt.Sprintf(".dq.npy.tmp-%d-z", dead),
		fmt.Sprintf(".out.npy.bak-%d-q1", dead), // out.npy exists: removed
	}
	keep := []string{
		fmt.Sprintf(".out.npy.tmp-%d-abc", self),
		".out.npy.tmp-1-abc",                      // pid 1 is alive
		".out.npy.tmp123456",                      // older naming: not provably ours
		fmt.Sprintf(".out.npy.tmp-%d-", dead),     // malformed
		fmt.Sprintf(".out.npy.tmp-0%d-ab", dead),  // malformed pid
		fmt.Sprintf("out.npy.tmp-%d-ab", dead),    // not hidden
		fmt.Sprintf(".other.txt.tmp-%d-AB", dead), // upper case: not ours
	}
	for _, n := range append(append([]string{}, stale...), keep...) {
		put(n, "junk")
	}
	put(fmt.Sprintf(".lse.npy.bak-%d-r2", dead), "old lse") // lse.npy missing: restored
	if err := WriteFloat32(filepath.Join(dir, "out.npy"), []float32{1}, []int{1}); err != nil {
		t.Fatal(err)
	}
	got := snapshot(t, dir)
	for _, n := range stale {
		if _, ok := got[n]; ok {
			t.Errorf("stale %s not removed", n)
		}
	}
	for _, n := range keep {
		if got[n] != "junk" {
			t.Errorf("%s removed or changed", n)
		}
	}
	if got["lse.npy"] != "old lse" {
		t.Errorf("stale backup of a missing lse.npy not restored: %q", got["lse.npy"])
	}
	if len(got) != len(keep)+2 {
		t.Errorf("directory holds %d entries: %v", len(got), got)
	}
	if _, _, pid, ok := parseTempName(filepath.Base(tempName(filepath.Join(dir, "a.b.npy"), "tmp"))); !ok || pid != self {
		t.Errorf("tempName does not parse back")
	}
}

// snapshot returns the names and contents of the entries of dir.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			m[e.Name()] = "<" + e.Type().String() + ">"
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = string(b)
	}
	return m
}

func sameSnapshot(t *testing.T, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s changed (present %v)", k, ok)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s left behind", k)
		}
	}
}

// outputs is a set of five arrays in dir like the attn command writes.
func outputs(dir string, v float32) map[string]Array {
	m := map[string]Array{}
	for i, name := range []string{"dk.npy", "dq.npy", "dv.npy", "lse.npy", "out.npy"} {
		m[filepath.Join(dir, name)] = Array{Shape: []int{2}, F32: []float32{v, float32(i)}}
	}
	return m
}

// When one destination is a directory, WriteFiles says so and every earlier
// file is left byte-identical (the rollback used to delete them).
func TestWriteFilesDirectoryInTheWay(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFiles(outputs(dir, 1)); err != nil {
		t.Fatal(err)
	}
	lse := filepath.Join(dir, "lse.npy")
	if err := os.Remove(lse); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(lse, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	err := WriteFiles(outputs(dir, 2))
	if err == nil || err.Error() != lse+" is a directory" {
		t.Errorf("err = %v, want %q", err, lse+" is a directory")
	}
	sameSnapshot(t, snapshot(t, dir), before)
}
