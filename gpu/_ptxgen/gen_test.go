package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

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
				tile.FwdConfig(d).Name(dt.name): tile.FwdParams,
				tile.PreName(dt.name):           tile.PreParams,
				tile.ConvertName(dt.name):       tile.ConvertParams,
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

// TestPTXAS assembles every kernel with NVIDIA's ptxas for sm_80 and sm_90
// and logs registers, spills and shared memory. It is a development check:
// it needs the CUDA toolkit's ptxas (PTXAS=/path/to/ptxas or on PATH) and
// skips without it.
func TestPTXAS(t *testing.T) {
	ptxas := os.Getenv("PTXAS")
	if ptxas == "" {
		p, err := exec.LookPath("ptxas")
		if err != nil {
			t.Skip("no ptxas: set PTXAS=/path/to/ptxas (CUDA toolkit ≥ 11.8) to assemble the kernels")
		}
		ptxas = p
	}
	dir := t.TempDir()
	used := regexp.MustCompile(`Used (\d+) registers`)
	spill := regexp.MustCompile(`(\d+) bytes spill stores, (\d+) bytes spill loads`)
	entry := regexp.MustCompile(`Compiling entry function '(\w+)' for '(\w+)'`)
	for _, dt := range dtypes {
		for _, d := range tile.HeadDims {
			text, err := module(dt, d)
			if err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(dir, moduleName(dt.name, d))
			if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, arch := range []string{"sm_80", "sm_90"} {
				out, err := exec.Command(ptxas, "-arch="+arch, "-v", f, "-o", filepath.Join(dir, "out.cubin")).CombinedOutput()
				if err != nil {
					t.Errorf("ptxas -arch=%s %s: %v\n%s", arch, moduleName(dt.name, d), err, out)
					continue
				}
				if strings.Contains(string(out), "warning") {
					t.Errorf("ptxas -arch=%s %s warns:\n%s", arch, moduleName(dt.name, d), out)
				}
				var name string
				for _, l := range strings.Split(string(out), "\n") {
					if m := entry.FindStringSubmatch(l); m != nil {
						name = m[1]
					}
					if m := spill.FindStringSubmatch(l); m != nil && name != "" {
						t.Logf("%-18s %s  spill %s/%s bytes", name, arch, m[1], m[2])
					}
					if m := used.FindStringSubmatch(l); m != nil && name != "" {
						t.Logf("%-18s %s  %s registers, %d bytes dynamic shared memory", name, arch, m[1], tile.SmemBytes(name, d))
					}
				}
			}
		}
	}
}
