package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"

	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// Generation is deterministic and every kernel declares the parameters the
// host passes, in its order.
func TestModules(t *testing.T) {
	for _, dt := range dtypes {
		for _, d := range tile.HeadDims {
			a, err := module(dt, d)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := module(dt, d)
			if a != b {
				t.Fatalf("%s d%d: two generations differ", dt.name, d)
			}
			want := map[string][]tile.Param{
				tile.FwdConfig(d).Name(dt.name):      tile.FwdParams,
				tile.FwdSplitConfig(d).Name(dt.name): tile.FwdSplitParams,
				tile.CombineName(dt.name, d):         tile.CombineParams,
				tile.PreName(dt.name):                tile.PreParams,
				tile.ConvertName(dt.name):            tile.ConvertParams,
				tile.ConvertDQName(dt.name):          tile.ConvertDQParams,
			}
			if tile.BwdConfig(d).Check() == nil {
				want[tile.BwdConfig(d).Name(dt.name, true)] = tile.BwdParams
				want[tile.BwdConfig(d).Name(dt.name, false)] = tile.BwdParams
				want[tile.DQConfig(d).Name(dt.name)] = tile.DQParams
			}
			for name, ps := range want {
				var decl []string
				for _, p := range ps {
					decl = append(decl, fmt.Sprintf("\t.param %s p_%s", p.Type, p.Name))
				}
				head := ".visible .entry " + name + "(\n" + strings.Join(decl, ",\n") + "\n)"
				if !strings.Contains(a, head) {
					t.Errorf("%s d%d: kernel %s missing or with other parameters", dt.name, d, name)
				}
			}
		}
	}
}

// TestPTXAS assembles every committed module (../ptx) with NVIDIA's ptxas
// for sm_80 and sm_90 and fails on an error, a warning or a spilled byte,
// or a forward kernel whose blocks per SM are not those package tile
// assumes; it logs each kernel's registers, shared memory and estimated
// occupancy.
// It needs ptxas (CUDA ≥ 11.8): PTXAS=/path/to/ptxas, or ptxas on PATH; it
// skips without either, and fails if PTXAS names one that does not run.
// ../ptxascheck.sh fetches ptxas and runs it (CI does).
func TestPTXAS(t *testing.T) {
	ptxas := os.Getenv("PTXAS")
	if ptxas == "" {
		p, err := exec.LookPath("ptxas")
		if err != nil {
			t.Skip("no ptxas: set PTXAS=/path/to/ptxas (CUDA toolkit ≥ 11.8) or run ../ptxascheck.sh")
		}
		ptxas = p
	}
	files, err := filepath.Glob("../ptx/*.ptx")
	if err != nil || len(files) == 0 {
		t.Fatalf("no committed PTX: %v", err)
	}
	var (
		mu   sync.Mutex
		rows []ptxasRow
		wg   sync.WaitGroup
	)
	for _, f := range files {
		for _, arch := range []string{"sm_80", "sm_90"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := assemble(ptxas, f, arch, t.TempDir())
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Error(err)
				}
				rows = append(rows, r...)
			}()
		}
	}
	wg.Wait()
	seen := map[[2]string]bool{} // the small kernels are in every module
	uniq := rows[:0]
	for _, r := range rows {
		if k := [2]string{r.kernel, r.arch}; !seen[k] {
			seen[k] = true
			uniq = append(uniq, r)
		}
	}
	rows = uniq
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].kernel != rows[j].kernel {
			return rows[i].kernel < rows[j].kernel
		}
		return rows[i].arch < rows[j].arch
	})
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "kernel\tarch\tthreads\tregisters\tspill st/ld B\tsmem B\tblocks/SM\tlimit\toccupancy\t")
	for _, r := range rows {
		if r.spillSt > 0 || r.spillLd > 0 {
			t.Errorf("%s %s spills %d/%d bytes", r.kernel, r.arch, r.spillSt, r.spillLd)
		}
		blocks, limit := occupancy(r)
		if w := assumedBlocks(r); w != 0 && w != blocks {
			t.Errorf("%s %s: %d blocks per SM, package tile assumes %d (Fwd.BlocksPerSM)", r.kernel, r.arch, blocks, w)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d/%d\t%d\t%d\t%s\t%.0f%%\t\n", r.kernel, r.arch, r.threads, r.regs, r.spillSt, r.spillLd, r.smem, blocks, limit, 100*float64(blocks*r.threads/32)/64)
	}
	w.Flush()
	t.Logf("ptxas %s, every kernel of ../ptx (occupancy: resident warps of 64; smem: dynamic + static):\n%s", ptxasVersion(ptxas), b.String())
}

// assumedBlocks returns the blocks per SM package tile assumes for a
// forward kernel (the split heuristic counts block slots with it), 0 for
// the others.
func assumedBlocks(r ptxasRow) int {
	switch {
	case strings.HasPrefix(r.kernel, "fwd_"):
		return tile.FwdConfig(r.hd).BlocksPerSM()
	case strings.HasPrefix(r.kernel, "fwdsplit_"):
		return tile.FwdSplitConfig(r.hd).BlocksPerSM()
	}
	return 0
}

// ptxasRow is what ptxas -v reports for one kernel.
type ptxasRow struct {
	kernel, arch      string
	regs              int
	spillSt, spillLd  int
	smem, threads, hd int
}

var (
	entryRe = regexp.MustCompile(`Compiling entry function '(\w+)' for '(\w+)'`)
	spillRe = regexp.MustCompile(`(\d+) bytes spill stores, (\d+) bytes spill loads`)
	usedRe  = regexp.MustCompile(`Used (\d+) registers(?:, (\d+) bytes smem)?`)
	hdRe    = regexp.MustCompile(`_d(\d+)\.ptx$`)
)

// assemble runs ptxas -v on one module for one architecture.
func assemble(ptxas, file, arch, dir string) ([]ptxasRow, error) {
	out, err := exec.Command(ptxas, "-arch="+arch, "-v", file, "-o", filepath.Join(dir, "out.cubin")).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ptxas -arch=%s %s: %v\n%s", arch, file, err, out)
	}
	if strings.Contains(strings.ToLower(string(out)), "warning") {
		return nil, fmt.Errorf("ptxas -arch=%s %s warns:\n%s", arch, file, out)
	}
	hd, _ := strconv.Atoi(hdRe.FindStringSubmatch(file)[1])
	var rows []ptxasRow
	var cur *ptxasRow
	for _, l := range strings.Split(string(out), "\n") {
		if m := entryRe.FindStringSubmatch(l); m != nil {
			rows = append(rows, ptxasRow{kernel: m[1], arch: m[2], hd: hd, threads: tile.Threads(m[1], hd), smem: tile.SmemBytes(m[1], hd)})
			cur = &rows[len(rows)-1]
		}
		if cur == nil {
			continue
		}
		if m := spillRe.FindStringSubmatch(l); m != nil {
			cur.spillSt, _ = strconv.Atoi(m[1])
			cur.spillLd, _ = strconv.Atoi(m[2])
		}
		if m := usedRe.FindStringSubmatch(l); m != nil {
			cur.regs, _ = strconv.Atoi(m[1])
			if m[2] != "" {
				s, _ := strconv.Atoi(m[2])
				cur.smem += s
			}
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("ptxas -arch=%s %s: no kernel in its report:\n%s", arch, file, out)
	}
	return rows, nil
}

// occupancy estimates the resident blocks per SM from registers (64 K per
// SM, allocated per warp in units of 256), shared memory (sm_80: 164 KiB
// per SM, sm_90: 228 KiB, plus 1 KiB reserved per block), threads (2048)
// and the 32-block limit, and names the limiting resource.
func occupancy(r ptxasRow) (blocks int, limit string) {
	smemSM := 164 << 10
	if r.arch == "sm_90" {
		smemSM = 228 << 10
	}
	warps := r.threads / 32
	regsPerWarp := (r.regs*32 + 255) / 256 * 256
	byRegs := 65536 / (regsPerWarp * warps)
	bySmem := smemSM / (r.smem + 1024)
	byThreads := 2048 / r.threads
	blocks, limit = 32, "blocks"
	for _, c := range []struct {
		n    int
		name string
	}{{byRegs, "registers"}, {bySmem, "smem"}, {byThreads, "threads"}} {
		if c.n < blocks {
			blocks, limit = c.n, c.name
		}
	}
	return blocks, limit
}

func ptxasVersion(ptxas string) string {
	out, _ := exec.Command(ptxas, "--version").Output()
	if m := regexp.MustCompile(`release [\d.]+, V[\d.]+`).Find(out); m != nil {
		return string(m)
	}
	return "(unknown version)"
}
