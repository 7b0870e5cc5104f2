package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/npy"
)

// oneLine fails unless stderr is exactly one line containing every want.
func oneLine(t *testing.T, what, stderr string, want ...string) {
	t.Helper()
	if !strings.HasSuffix(stderr, "\n") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("%s: stderr is not one line: %q", what, stderr)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("%s: stderr %q does not contain %q", what, stderr, w)
		}
	}
}

// sparseNpy makes a float32 .npy file with the given shape whose data is a
// hole: as large as its header claims, without using the disk.
func sparseNpy(t *testing.T, path string, shape ...int64) string {
	t.Helper()
	dims := make([]string, len(shape))
	n := int64(4)
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
		n *= d
	}
	tuple := "(" + strings.Join(dims, ", ") + ")"
	if len(shape) == 1 {
		tuple = "(" + dims[0] + ",)"
	}
	hdr := atRawNpy("<f4", false, tuple, nil)
	if err := os.WriteFile(path, hdr, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(len(hdr))+n); err != nil {
		t.Fatalf("cannot make a sparse file of %d bytes: %v", n, err)
	}
	return path
}

// Inputs that are really as large as their headers say, and runs whose
// buffers would not fit, are refused with one line before allocating
// (they used to end in "fatal error: out of memory").
func TestMemoryRefused(t *testing.T) {
	dir := t.TempDir()
	base := atInputs(t, dir)
	huge := sparseNpy(t, filepath.Join(dir, "huge.npy"), 1, 1<<38, 1, 4) // 4 TiB
	hugeSlopes := sparseNpy(t, filepath.Join(dir, "slopes.npy"), 1<<40)
	// A 32-bit build cannot even describe such shapes: the header is refused.
	// Nor take -seqlen 3000000000 (a usage error there); 2e9 and 2^30 do.
	memory, long, ovf := "memory", "3000000000", "4294967296"
	if strconv.IntSize == 32 {
		memory, long, ovf = "too large", "2000000000", "1073741824"
	}
	replace := func(flag, val string) []string {
		out := slices.Clone(base)
		out[slices.Index(out, flag)+1] = val
		return out
	}
	out := filepath.Join(dir, "out")
	for _, c := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"4 TiB q", append(replace("-q", huge), "-o", out), 1, []string{"huge.npy", memory}},
		{"4 TiB dout", append(replace("-dout", huge), "-o", out), 1, []string{"huge.npy", memory}},
		{"4 TiB alibi", append(slices.Clone(base), "-alibi", hugeSlopes, "-o", out), 1, []string{"slopes.npy", memory}},
		{"attn limit", append(slices.Clone(base), "-max-memory", "1K", "-o", out), 1, []string{"-max-memory 1.0 KiB", "needs"}},
		{"attn bad limit", append(slices.Clone(base), "-max-memory", "lots", "-o", out), 2, []string{"-max-memory"}},
		{"demo seqlen 3e9", []string{"demo", "-seqlen", long}, 1, []string{"needs", "memory"}},
		{"demo overflow", []string{"demo", "-seqlen", ovf, "-batch", ovf, "-heads", ovf}, 1, []string{"more than 16 EiB"}},
		{"demo limit", []string{"demo", "-seqlen", "256", "-max-memory", "2M"}, 1, []string{"-max-memory 2.0 MiB"}},
		{"bench seqlen 3e9", []string{"bench", "-seqlen", long, "-headdim", "64"}, 1, []string{"needs", "memory"}},
		{"bench overflow", []string{"bench", "-seqlen", ovf, "-batch", ovf, "-heads", ovf}, 1, []string{"more than 16 EiB"}},
		{"bench limit", []string{"bench", "-seqlen", "256", "-max-memory", "1M"}, 1, []string{"-max-memory 1.0 MiB"}},
		{"bench bad limit", []string{"bench", "-max-memory", "-3G"}, 2, []string{"-max-memory"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			code, stdout, stderr := atRun(c.args...)
			if code != c.code {
				t.Errorf("exit status %d, want %d (stderr %q)", code, c.code, stderr)
			}
			oneLine(t, c.name, stderr, c.want...)
			if stdout != "" {
				t.Errorf("stdout %q", stdout)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v: it must refuse before working", d)
			}
		})
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused run created %s", out)
	}
	// A limit that fits lets the run go ahead.
	if code, _, stderr := atRun(append(slices.Clone(base), "-max-memory", "1G", "-o", out)...); code != 0 {
		t.Errorf("-max-memory 1G: exit %d, %q", code, stderr)
	}
}

// A FIFO, a device or a directory given as an input is refused at once
// (a FIFO used to block forever), with one line naming it.
func TestNonRegularInput(t *testing.T) {
	dir := t.TempDir()
	base := atInputs(t, dir)
	fifo := filepath.Join(dir, "pipe.npy")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	atWriteI32(t, filepath.Join(dir, "cu.npy"), []int32{0, 4}, 2)
	for _, c := range [][]string{
		{"-q", fifo}, {"-k", fifo}, {"-v", "/dev/null"}, {"-dout", dir},
		{"-alibi", fifo}, {"-cu-seqlens-q", fifo, "-cu-seqlens-k", filepath.Join(dir, "cu.npy")},
	} {
		args := slices.Clone(base)
		for i := 0; i < len(c); i += 2 {
			if j := slices.Index(args, c[i]); j >= 0 {
				args[j+1] = c[i+1]
			} else {
				args = append(args, c[i], c[i+1])
			}
		}
		args = append(args, "-o", filepath.Join(dir, "out"))
		done := make(chan [3]string, 1)
		go func() {
			code, _, stderr := atRun(args...)
			done <- [3]string{fmt.Sprint(code), stderr}
		}()
		select {
		case r := <-done:
			if r[0] != "1" {
				t.Errorf("%v: exit status %s", c, r[0])
			}
			oneLine(t, fmt.Sprint(c), r[1], c[1], "not a regular file")
		case <-time.After(10 * time.Second):
			if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close() // let the blocked reader go
			}
			t.Fatalf("%v: still running after 10 s", c)
		}
	}
}

// dirState returns the names and contents of the files in dir.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, n := range atDirNames(t, dir) {
		p := filepath.Join(dir, n)
		if st, err := os.Lstat(p); err != nil || !st.Mode().IsRegular() {
			m[n] = "<not a regular file>"
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		m[n] = string(b)
	}
	return m
}

func sameState(t *testing.T, got, want map[string]string) {
	t.Helper()
	for n, w := range want {
		if g, ok := got[n]; !ok || g != w {
			t.Errorf("%s changed or removed", n)
		}
	}
	for n := range got {
		if _, ok := want[n]; !ok {
			t.Errorf("%s left behind", n)
		}
	}
}

// earlierRun fills out with the files of a good run and returns the
// arguments of a second run whose outputs differ.
func earlierRun(t *testing.T, dir, out string) []string {
	t.Helper()
	base := atInputs(t, dir)
	if code, _, stderr := atRun(append(slices.Clone(base), "-o", out)...); code != 0 {
		t.Fatalf("first run: exit %d, %q", code, stderr)
	}
	if len(atDirNames(t, out)) != 5 {
		t.Fatalf("first run wrote %v", atDirNames(t, out))
	}
	return append(slices.Clone(base), "-causal", "-o", out)
}

// When one output cannot be written, the error names the real cause and
// every file of the earlier run is byte-identical (the dq/dk/dv.npy of the
// earlier run used to be deleted, with a misleading "file exists").
func TestAttnOutputsAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	args := earlierRun(t, dir, out)
	lse := filepath.Join(out, "lse.npy")
	if err := os.Remove(lse); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(lse, "keep"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := dirState(t, out)
	code, _, stderr := atRun(args...)
	if code != 1 || stderr != "flashattn attn: "+lse+" is a directory\n" {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	sameState(t, dirState(t, out), before)
	if err := os.RemoveAll(lse); err != nil {
		t.Fatal(err)
	}

	// A failure injected before every step of the write.
	before = dirState(t, out)
	for _, stage := range []npy.Stage{npy.StageWrite, npy.StageBackup, npy.StageRename} {
		for _, name := range []string{"dk.npy", "dv.npy", "lse.npy", "out.npy"} {
			injected := errors.New("disk on fire")
			var errb bytes.Buffer
			code := runSeams(args, io.Discard, &errb, seams{writeHook: func(_ context.Context, s npy.Stage, p string) error {
				if s == stage && p == filepath.Join(out, name) {
					return injected
				}
				return nil
			}})
			what := fmt.Sprintf("%v %s", stage, name)
			if name == "lse.npy" && stage == npy.StageBackup {
				// lse.npy is new: nothing to back up, the run succeeds.
				if code != 0 {
					t.Errorf("%s: exit %d, %q", what, code, errb.String())
				}
				os.Remove(lse)
				before = dirState(t, out)
				continue
			}
			if code != 1 {
				t.Errorf("%s: exit %d", what, code)
			}
			oneLine(t, what, errb.String(), filepath.Join(out, name), "disk on fire")
			sameState(t, dirState(t, out), before)
		}
	}

	// A new OUTDIR is removed again when the write fails.
	fresh := filepath.Join(dir, "fresh")
	args[len(args)-1] = fresh
	code = runSeams(args, io.Discard, io.Discard, seams{writeHook: func(_ context.Context, s npy.Stage, p string) error {
		if s == npy.StageRename && filepath.Base(p) == "out.npy" {
			return errors.New("no")
		}
		return nil
	}})
	if _, err := os.Stat(fresh); code != 1 || !os.IsNotExist(err) {
		t.Errorf("exit %d; fresh OUTDIR after a failed write: %v", code, err)
	}

	// A read-only OUTDIR (permissions do not stop root).
	if os.Geteuid() != 0 {
		args[len(args)-1] = out
		if err := os.Chmod(out, 0o555); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(out, 0o755)
		code, _, stderr := atRun(args...)
		if code != 1 {
			t.Errorf("read-only: exit %d", code)
		}
		oneLine(t, "read-only", stderr, "cannot create a file in "+out, "permission denied")
		sameState(t, dirState(t, out), before)
	}
}

// TestAttnHelperProcess is the child of TestAttnSignals and
// TestAttnRepeatedSignals: with FLASHATTN_HELPER=STAGE:FILE it runs the
// command line after "--" and, at that step of the write (FILE empty: the
// first step of that stage), prints "paused" and waits for a signal. With
// FLASHATTN_HELPER2=STAGE:FILE:N it pauses again at that later step,
// prints "paused2" and waits until N signals in all have arrived.
func TestAttnHelperProcess(t *testing.T) {
	spec := os.Getenv("FLASHATTN_HELPER")
	if spec == "" {
		return
	}
	var signals atomic.Int32
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for range sigs {
			signals.Add(1)
		}
	}()
	stage, file, _ := strings.Cut(spec, ":")
	stage2, rest, _ := strings.Cut(os.Getenv("FLASHATTN_HELPER2"), ":")
	file2, n2, _ := strings.Cut(rest, ":")
	want2, _ := strconv.Atoi(n2)
	match := func(s npy.Stage, p, stage, file string) bool {
		return s.String() == stage && (file == "" || filepath.Base(p) == file)
	}
	paused, paused2 := false, false
	args := os.Args[slices.Index(os.Args, "--")+1:]
	hook := func(ctx context.Context, s npy.Stage, p string) error {
		switch {
		case !paused && match(s, p, stage, file):
			paused = true
			fmt.Println("paused")
			<-ctx.Done()
			return context.Cause(ctx)
		case paused && !paused2 && stage2 != "" && match(s, p, stage2, file2):
			paused2 = true
			fmt.Println("paused2")
			for deadline := time.Now().Add(10 * time.Second); int(signals.Load()) < want2 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
		return nil
	}
	os.Exit(runSeams(args, io.Discard, os.Stderr, seams{writeHook: hook}))
}

// startPaused starts the helper process and waits until it is paused at
// the given step of the write; spec2 is FLASHATTN_HELPER2 ("" for none).
func startPaused(t *testing.T, spec string, args []string) (*exec.Cmd, *bytes.Buffer) {
	cmd, stderr, _ := startPaused2(t, spec, "", args)
	return cmd, stderr
}

func startPaused2(t *testing.T, spec, spec2 string, args []string) (*exec.Cmd, *bytes.Buffer, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestAttnHelperProcess$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "FLASHATTN_HELPER="+spec, "FLASHATTN_HELPER2="+spec2)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(pipe)
	line, err := out.ReadString('\n')
	if line != "paused\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %q, %v; stderr %q", line, err, stderr.String())
	}
	return cmd, &stderr, out
}

// SIGTERM or SIGINT in the middle of the write (a temporary file half
// written, or some outputs already renamed) restores OUTDIR exactly and
// leaves no temporary file; a process killed outright leaves its
// temporaries, which the next run removes.
func TestAttnSignals(t *testing.T) {
	for _, c := range []struct {
		spec string
		sig  syscall.Signal
	}{
		{"write:dv.npy", syscall.SIGTERM},
		{"write:dk.npy", syscall.SIGINT},
		{"backup:out.npy", syscall.SIGTERM},
		{"rename:lse.npy", syscall.SIGINT},
		{"rename:out.npy", syscall.SIGTERM},
	} {
		t.Run(c.spec, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			args := earlierRun(t, dir, out)
			before := dirState(t, out)
			cmd, stderr := startPaused(t, c.spec, args)
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			cmd.Wait()
			if got := cmd.ProcessState.ExitCode(); got != 128+int(c.sig) {
				t.Errorf("exit status %d, want %d", got, 128+int(c.sig))
			}
			oneLine(t, c.spec, stderr.String(), "interrupted", c.sig.String())
			sameState(t, dirState(t, out), before)
		})
	}
	t.Run("SIGTERM into a new OUTDIR", func(t *testing.T) {
		dir := t.TempDir()
		args := append(atInputs(t, dir), "-o", filepath.Join(dir, "new"))
		cmd, _ := startPaused(t, "write:lse.npy", args)
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
			t.Errorf("OUTDIR left behind: %v", err)
		}
	})
	t.Run("SIGKILL, then a later run", func(t *testing.T) {
		dir := t.TempDir()
		out := filepath.Join(dir, "out")
		args := earlierRun(t, dir, out)
		cmd, _ := startPaused(t, "write:out.npy", args)
		cmd.Process.Kill()
		cmd.Wait()
		var temps []string
		for _, n := range atDirNames(t, out) {
			if strings.Contains(n, fmt.Sprintf(".tmp-%d-", cmd.Process.Pid)) {
				temps = append(temps, n)
			}
		}
		if len(temps) != 5 {
			t.Fatalf("killed run left %v, want its 5 temporary files", atDirNames(t, out))
		}
		if code, _, stderr := atRun(args...); code != 0 {
			t.Fatalf("later run: exit %d, %q", code, stderr)
		}
		if names := atDirNames(t, out); !slices.Equal(names, []string{"dk.npy", "dq.npy", "dv.npy", "lse.npy", "out.npy"}) {
			t.Errorf("after the later run: %v", names)
		}
	})
}

// outputNames are the files of a backward run, the order they are
// renamed in.
var outputNames = []string{"dk.npy", "dq.npy", "dv.npy", "lse.npy", "out.npy"}

// outputs returns the contents of the outputs in dir, and the names of
// the other files there.
func outputs(t *testing.T, dir string) (files map[string]string, others []string) {
	t.Helper()
	files = map[string]string{}
	for n, c := range dirState(t, dir) {
		if slices.Contains(outputNames, n) {
			files[n] = c
		} else {
			others = append(others, n)
		}
	}
	return files, others
}

// Any number of SIGINTs and SIGTERMs at any step of attn's write leave
// OUTDIR all old (they used to leave dk, dq new and dv, lse, out old when
// a second signal came while the first one's rollback ran, and the next
// run then deleted the backups); a SIGKILL leaves a state that the next
// run, even one that fails itself, turns into all old (before the commit
// point, or while undoing) or all new (after it).
func TestAttnRepeatedSignals(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process per case")
	}
	for _, c := range []struct {
		pause, then string // where the first signal comes; where the others come ("" at once)
		sig         syscall.Signal
		more        int  // further signals
		kill        bool // SIGKILL (at "then", or at "pause") instead of the further signals
		want        string
	}{
		{"write:dk.npy", "", syscall.SIGINT, 2, false, "old"},
		{"write:out.npy", "", syscall.SIGTERM, 1, false, "old"},
		{"backup:out.npy", "", syscall.SIGTERM, 3, false, "old"},
		{"commit:", "", syscall.SIGINT, 2, false, "old"},
		{"rename:dk.npy", "", syscall.SIGINT, 3, false, "old"},
		{"rename:lse.npy", "", syscall.SIGTERM, 5, false, "old"},
		{"rename:dv.npy", "restore:dq.npy", syscall.SIGINT, 1, false, "old"},
		{"rename:dv.npy", "restore:dk.npy", syscall.SIGINT, 2, false, "old"},
		{"rename:out.npy", "restore:lse.npy", syscall.SIGTERM, 4, false, "old"},
		{"rename:out.npy", "restore:dk.npy", syscall.SIGINT, 3, false, "old"},
		{"write:dv.npy", "", 0, 0, true, "old"},
		{"commit:", "", 0, 0, true, "old"},
		{"rename:dk.npy", "", 0, 0, true, "new"},
		{"rename:lse.npy", "", 0, 0, true, "new"},
		{"rename:dv.npy", "restore:dq.npy", syscall.SIGINT, 0, true, "old"},
		{"rename:out.npy", "restore:dk.npy", syscall.SIGTERM, 0, true, "old"},
	} {
		name := fmt.Sprintf("%s,%s,%v,%d,kill=%v", c.pause, c.then, c.sig, c.more, c.kill)
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			out, fresh := filepath.Join(dir, "out"), filepath.Join(dir, "fresh")
			args := earlierRun(t, dir, out)
			old, _ := outputs(t, out)
			freshArgs := slices.Clone(args)
			freshArgs[len(freshArgs)-1] = fresh
			if code, _, stderr := atRun(freshArgs...); code != 0 {
				t.Fatalf("new run: exit %d, %q", code, stderr)
			}
			newFiles, _ := outputs(t, fresh)
			if reflect.DeepEqual(old, newFiles) {
				t.Fatal("the second run's outputs equal the first's")
			}
			spec2 := ""
			if c.then != "" {
				spec2 = fmt.Sprintf("%s:%d", c.then, 1+c.more)
			}
			cmd, stderr, stdout := startPaused2(t, c.pause, spec2, args)
			defer cmd.Process.Kill()
			signal := func(s os.Signal) {
				if err := cmd.Process.Signal(s); err != nil {
					t.Fatal(err)
				}
			}
			if c.sig != 0 {
				signal(c.sig)
			}
			if c.then != "" {
				if line, err := stdout.ReadString('\n'); line != "paused2\n" {
					t.Fatalf("helper: %q, %v; stderr %q", line, err, stderr.String())
				}
			}
			if c.kill {
				signal(os.Kill)
			} else {
				for range c.more {
					signal(c.sig)
					time.Sleep(time.Millisecond)
				}
			}
			cmd.Wait()
			files, others := outputs(t, out)
			if !c.kill {
				if got := cmd.ProcessState.ExitCode(); got != 128+int(c.sig) {
					t.Errorf("exit status %d, want %d (stderr %q)", got, 128+int(c.sig), stderr.String())
				}
				if strings.Count(stderr.String(), "\n") > 1 {
					t.Errorf("stderr is more than one line: %q", stderr.String())
				}
				if !reflect.DeepEqual(files, old) {
					t.Errorf("after the signals OUTDIR is not the old files (%v, others %v)", keysOf(files), others)
				}
				if strings.HasPrefix(c.pause, "rename") && len(others) > 0 {
					t.Errorf("an undone commit left %v", others)
				}
			}
			// The next run into OUTDIR, which fails at its first step,
			// first makes OUTDIR consistent and clean.
			var errb bytes.Buffer
			code := runSeams(args, io.Discard, &errb, seams{writeHook: func(_ context.Context, s npy.Stage, p string) error {
				if s == npy.StageWrite {
					return errors.New("disk on fire")
				}
				return nil
			}})
			if code != 1 || !strings.Contains(errb.String(), "disk on fire") {
				t.Errorf("next run: exit %d, %q", code, errb.String())
			}
			files, others = outputs(t, out)
			want := old
			if c.want == "new" {
				want = newFiles
			}
			if !reflect.DeepEqual(files, want) || len(others) > 0 {
				t.Errorf("after the next run OUTDIR holds %v (others %v), want the %s files", keysOf(files), others, c.want)
			}
		})
	}
}

func keysOf(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
