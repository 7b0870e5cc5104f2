package gpu

import (
	"io/fs"
	"math"
	"regexp"
	"strconv"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/gpu/internal/tile"
	"github.com/flashattn/flashattn/internal/kernel"
)

// The log2/exp constants cannot drift: tile's (which the generator emits
// and the host multiplies its parameters by) equal the CPU kernels' exp
// constants, and every float immediate of the committed PTX that is near
// one of them (or its negation or double) is exactly it.
func TestExpConstantsTied(t *testing.T) {
	if tile.Log2E != float32(kernel.ExpLog2e) {
		t.Errorf("tile.Log2E %v, kernel.ExpLog2e %v", tile.Log2E, float32(kernel.ExpLog2e))
	}
	if ln2 := float32(kernel.ExpLn2Hi + kernel.ExpLn2Lo); tile.Ln2 != ln2 {
		t.Errorf("tile.Ln2 %v, kernel.ExpLn2Hi+Lo %v", tile.Ln2, ln2)
	}
	want := map[string]float32{"log2e": tile.Log2E, "-log2e": -tile.Log2E, "2log2e": 2 * tile.Log2E, "ln2": tile.Ln2}
	seen := map[string]int{}
	imm := regexp.MustCompile(`\b0f([0-9A-F]{8})\b`)
	files, _ := fs.Glob(ptxFiles, "ptx/*.ptx")
	for _, f := range files {
		text, _ := ptxFiles.ReadFile(f)
		for _, m := range imm.FindAllStringSubmatch(string(text), -1) {
			bits, _ := strconv.ParseUint(m[1], 16, 32)
			v := math.Float32frombits(uint32(bits))
			for name, c := range want {
				if math.Abs(float64(v-c)) > 1e-3*math.Abs(float64(c)) {
					continue
				}
				if v != c {
					t.Errorf("%s: immediate %s = %v is near %s but is not %v", f, m[0], v, name, c)
				}
				seen[name]++
			}
		}
	}
	for _, name := range []string{"-log2e", "2log2e", "ln2"} {
		if seen[name] == 0 {
			t.Errorf("no immediate %s (%v) in the committed PTX: the kernels changed, update this test", name, want[name])
		}
	}
	q, k := fakeTensor(BF16, 1, 8, 1, 64), fakeTensor(BF16, 1, 8, 1, 64)
	p, err := validate(q, k, k, &Options{Options: flashattn.Options{Scale: 0.3, Softcap: 7}})
	if err != nil {
		t.Fatal(err)
	}
	a := p.fwdArgs(1, 2, 3, 4, 5, 0)
	scale, softcap := float32(0.3), float32(7) // products rounded as the host's
	if got := math.Float32frombits(uint32(a["scale_log2"])); got != scale*tile.Log2E {
		t.Errorf("scale_log2 %v, want 0.3·tile.Log2E", got)
	}
	if got := math.Float32frombits(uint32(a["cap_log2"])); got != softcap*tile.Log2E {
		t.Errorf("cap_log2 %v, want 7·tile.Log2E", got)
	}
}
