package gpu

import (
	"math"
	"strings"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// fakeTensor is a tensor on a fake buffer: enough for host-side validation,
// which never touches device memory.
func fakeTensor(dt DType, b, s, h, d int) Tensor {
	return Tensor{Buf: &Buffer{ptr: 0x1000, n: 2 * b * s * h * d}, DType: dt, Batch: b, Seq: s, Heads: h, Dim: d}
}

func TestValidate(t *testing.T) {
	q := fakeTensor(BF16, 2, 77, 8, 64)
	k := fakeTensor(BF16, 2, 131, 2, 64)
	v := fakeTensor(BF16, 2, 131, 2, 64)
	win := func(l, r int) *flashattn.Window { return &flashattn.Window{Left: l, Right: r} }
	nan := float32(math.NaN())
	cases := []struct {
		name    string
		q, k, v Tensor
		opts    *Options
		want    string // substring of the error; "" = valid
	}{
		{"ok", q, k, v, nil, ""},
		{"ok causal window softcap", q, k, v, &Options{Causal: true, Window: win(5, -1), Softcap: 30}, ""},
		{"nil buffer", Tensor{DType: BF16, Batch: 2, Seq: 77, Heads: 8, Dim: 64}, k, v, nil, "no buffer"},
		{"short buffer", Tensor{Buf: &Buffer{ptr: 1, n: 100}, DType: BF16, Batch: 2, Seq: 77, Heads: 8, Dim: 64}, k, v, nil, "needs"},
		{"zero dim", fakeTensor(BF16, 2, 0, 8, 64), k, v, nil, "≥ 1"},
		{"types differ", fakeTensor(F16, 2, 77, 8, 64), k, v, nil, "must match"},
		{"bad type", fakeTensor(DType(7), 2, 77, 8, 64), k, v, nil, "unknown type"},
		{"v shape", q, k, fakeTensor(BF16, 2, 130, 2, 64), nil, "want k's"},
		{"batch", q, fakeTensor(BF16, 3, 131, 2, 64), fakeTensor(BF16, 3, 131, 2, 64), nil, "incompatible"},
		{"dim", q, fakeTensor(BF16, 2, 131, 2, 128), fakeTensor(BF16, 2, 131, 2, 128), nil, "incompatible"},
		{"gqa", q, fakeTensor(BF16, 2, 131, 3, 64), fakeTensor(BF16, 2, 131, 3, 64), nil, "not a multiple"},
		{"headdim 96", fakeTensor(BF16, 1, 8, 1, 96), fakeTensor(BF16, 1, 8, 1, 96), fakeTensor(BF16, 1, 8, 1, 96), nil, "not supported"},
		{"scale nan", q, k, v, &Options{Scale: nan}, "Scale"},
		{"scale negative", q, k, v, &Options{Scale: -1}, "Scale"},
		{"softcap inf", q, k, v, &Options{Softcap: float32(math.Inf(1))}, "Softcap"},
		{"window", q, k, v, &Options{Window: win(-2, 0)}, "Window"},
		{"varlen batch", q, k, v, &Options{VarLen: &flashattn.VarLen{CuSeqlensQ: []int32{0, 77}, CuSeqlensK: []int32{0, 131}}}, "Batch 1"},
	}
	vq := fakeTensor(F16, 1, 100, 4, 128)
	vk := fakeTensor(F16, 1, 60, 4, 128)
	vl := func(cq, ck, used []int32) *Options {
		return &Options{VarLen: &flashattn.VarLen{CuSeqlensQ: cq, CuSeqlensK: ck, SeqUsedK: used}}
	}
	cases = append(cases, []struct {
		name    string
		q, k, v Tensor
		opts    *Options
		want    string
	}{
		{"varlen ok", vq, vk, vk, vl([]int32{0, 30, 30, 100}, []int32{0, 20, 50, 60}, []int32{20, 0, 3}), ""},
		{"varlen short", vq, vk, vk, vl([]int32{0}, []int32{0}, nil), "batch+1"},
		{"varlen start", vq, vk, vk, vl([]int32{1, 100}, []int32{0, 60}, nil), "want 0"},
		{"varlen decreasing", vq, vk, vk, vl([]int32{0, 50, 40, 100}, []int32{0, 20, 50, 60}, nil), "decreases"},
		{"varlen end", vq, vk, vk, vl([]int32{0, 99}, []int32{0, 60}, nil), "ends at"},
		{"varlen counts", vq, vk, vk, vl([]int32{0, 50, 100}, []int32{0, 60}, nil), "must match"},
		{"varlen used len", vq, vk, vk, vl([]int32{0, 100}, []int32{0, 60}, []int32{1, 2}), "SeqUsedK has"},
		{"varlen used range", vq, vk, vk, vl([]int32{0, 100}, []int32{0, 60}, []int32{61}), "outside"},
	}...)
	for _, c := range cases {
		p, err := validate(c.q, c.k, c.v, c.opts)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			} else if p == nil {
				t.Errorf("%s: nil problem", c.name)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// The problem's derived values: scale, softcap constants, mask bounds, and
// varlen geometry.
func TestProblemValues(t *testing.T) {
	q, k := fakeTensor(BF16, 2, 77, 8, 64), fakeTensor(BF16, 2, 131, 2, 64)
	p, err := validate(q, k, k, &Options{Causal: true, Window: &flashattn.Window{Left: 9, Right: 4}, Softcap: 20})
	if err != nil {
		t.Fatal(err)
	}
	if p.scale != 0.125 || p.left != 9 || p.right != 0 || !p.softcap {
		t.Errorf("scale %v left %d right %d softcap %v", p.scale, p.left, p.right, p.softcap)
	}
	if p, _ := validate(q, k, k, &Options{Window: &flashattn.Window{Left: 1 << 30, Right: 208}}); p.left != -1 || p.right != -1 {
		t.Errorf("huge window sides: left %d right %d, want both unbounded (-1)", p.left, p.right)
	}
	if p, _ := validate(q, k, k, &Options{Window: &flashattn.Window{Left: 207, Right: 0}}); p.left != 207 || p.right != 0 {
		t.Errorf("window sides: left %d right %d", p.left, p.right)
	}
	if math.Abs(float64(p.capScale)-0.125/20) > 1e-9 || math.Abs(float64(p.capLog2)-20*math.Log2E) > 1e-5 {
		t.Errorf("capScale %v capLog2 %v", p.capScale, p.capLog2)
	}
	if p.lseLen() != 2*8*77 || p.maxSq != 77 || p.maxSk != 131 || p.rowsQ != 154 {
		t.Errorf("lseLen %d maxSq %d maxSk %d rowsQ %d", p.lseLen(), p.maxSq, p.maxSk, p.rowsQ)
	}
	vq, vk := fakeTensor(F16, 1, 100, 4, 128), fakeTensor(F16, 1, 60, 4, 128)
	p, err = validate(vq, vk, vk, &Options{VarLen: &flashattn.VarLen{CuSeqlensQ: []int32{0, 30, 30, 100}, CuSeqlensK: []int32{0, 20, 50, 60}}})
	if err != nil {
		t.Fatal(err)
	}
	if p.batch != 3 || p.maxSq != 70 || p.maxSk != 30 || p.lseLen() != 400 || p.left != -1 || p.right != -1 {
		t.Errorf("varlen: batch %d maxSq %d maxSk %d lseLen %d window (%d,%d)", p.batch, p.maxSq, p.maxSk, p.lseLen(), p.left, p.right)
	}
	if got := p.cuInts(); len(got) != 8 || got[4] != 0 || got[7] != 60 {
		t.Errorf("cuInts = %v", got)
	}
}

// Every kernel gets exactly its parameters, in the generator's order.
func TestKernelArgs(t *testing.T) {
	q, k := fakeTensor(BF16, 2, 77, 8, 64), fakeTensor(BF16, 2, 131, 2, 64)
	p, err := validate(q, k, k, nil)
	if err != nil {
		t.Fatal(err)
	}
	lists := []struct {
		name   string
		a      args
		params []tile.Param
	}{
		{"fwd", p.fwdArgs(1, 2, 3, 4, 5, 0), tile.FwdParams},
		{"bwd", p.bwdArgs(1, 2, 3, 4, 5, 6, 7, 8, 9, 0), tile.BwdParams},
		{"dq", p.dqArgs(1, 2, 3, 4, 5, 6, 7, 0), tile.DQParams},
		{"pre", p.preArgs(1, 2, 3, 0), tile.PreParams},
		{"convert", convertArgs(1, 2, 10, 2, 4, 64), tile.ConvertParams},
	}
	for _, l := range lists {
		bits, err := l.a.list(l.params)
		if err != nil {
			t.Errorf("%s: %v", l.name, err)
			continue
		}
		for i, b := range bits {
			if b.Size != l.params[i].Size() {
				t.Errorf("%s: %s size %d", l.name, l.params[i].Name, b.Size)
			}
		}
	}
	a := p.fwdArgs(1, 2, 3, 4, 5, 0)
	if a["q_bs"] != 77*8*64 || a["k_rs"] != 2*64 || a["lse_bs"] != 8*77 || a["lse_hs"] != 77 || a["group"] != 4 {
		t.Errorf("strides: %v", a)
	}
	if a["right"] != uint64(uint32(0xffffffff)) || math.Float32frombits(uint32(a["scale_log2"])) != float32(0.125*math.Log2E) {
		t.Errorf("right %#x scale_log2 %#x", a["right"], a["scale_log2"])
	}
	delete(a, "q")
	if _, err := a.list(tile.FwdParams); err == nil {
		t.Error("a missing argument was not reported")
	}
}

// The embedded modules exist for every type and head dim and hold the
// kernels the host launches, for sm_80.
func TestEmbeddedPTX(t *testing.T) {
	for _, dt := range []DType{BF16, F16} {
		for _, d := range tile.HeadDims {
			text, err := ptxFiles.ReadFile(moduleFile(dt, d))
			if err != nil {
				t.Fatal(err)
			}
			s := string(text)
			names := []string{tile.FwdConfig(d).Name(dt.String()), tile.PreName(dt.String()), tile.ConvertName(dt.String())}
			if tile.BwdConfig(d).Check() == nil {
				names = append(names, tile.BwdConfig(d).Name(dt.String(), true), tile.BwdConfig(d).Name(dt.String(), false), tile.DQConfig(d).Name(dt.String()))
			}
			for _, n := range names {
				if !strings.Contains(s, ".visible .entry "+n+"(") {
					t.Errorf("%s: no kernel %s", moduleFile(dt, d), n)
				}
			}
			if !strings.Contains(s, ".target sm_80") || strings.Count(s, "{") != strings.Count(s, "}") {
				t.Errorf("%s: bad header or unbalanced braces", moduleFile(dt, d))
			}
			if smem := tile.SmemBytes(names[0], d); smem <= 0 || smem > tile.MaxSmem {
				t.Errorf("%s: shared memory %d", names[0], smem)
			}
		}
	}
}

func TestGather(t *testing.T) {
	data := make([]float32, 2*3*5*4)
	for i := range data {
		data[i] = float32(i)
	}
	// A view of heads 1..2 of a [2,3,5,4] tensor, strided.
	v := flashattn.Tensor{Data: data[4:], Batch: 2, Seq: 3, Heads: 2, Dim: 4, BatchStride: 60, SeqStride: 20, HeadStride: 4}
	got, err := gather(v, "x")
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for b := 0; b < 2; b++ {
		for s := 0; s < 3; s++ {
			for h := 1; h < 3; h++ {
				for d := 0; d < 4; d++ {
					if w := float32(b*60 + s*20 + h*4 + d); got[i] != w {
						t.Fatalf("element %d = %v, want %v", i, got[i], w)
					}
					i++
				}
			}
		}
	}
	for _, bad := range []flashattn.Tensor{
		{Batch: 1, Seq: 1, Heads: 1, Dim: 1},
		{Data: data, Batch: 0, Seq: 1, Heads: 1, Dim: 1},
		{Data: data, Batch: 1, Seq: 1, Heads: 2, Dim: 4, HeadStride: -4},
		{Data: data[:10], Batch: 1, Seq: 3, Heads: 1, Dim: 4},
	} {
		if _, err := gather(bad, "x"); err == nil {
			t.Errorf("gather(%+v) accepted", bad)
		}
	}
}

func TestDTypeRound(t *testing.T) {
	if BF16.Round(1.00390625) != 1 || F16.Round(1.00048828125) != 1 || F16.Round(70000) != float32(math.Inf(1)) {
		t.Error("Round")
	}
	if BF16.String() != "bf16" || F16.String() != "f16" || DType(5).String() != "DType(5)" {
		t.Error("String")
	}
}
