package gpu

import (
	"errors"
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

// fo wraps root options as the GPU's.
func fo(o flashattn.Options) *Options { return &Options{Options: o} }

// Every bad argument is a *flashattn.ArgError naming it; the rules package
// flashattn has (options, shapes against each other, cu_seqlens) give the
// very error flashattn.Forward gives.
func TestValidate(t *testing.T) {
	q := fakeTensor(BF16, 2, 77, 8, 64)
	k := fakeTensor(BF16, 2, 131, 2, 64)
	v := fakeTensor(BF16, 2, 131, 2, 64)
	win := func(l, r int) *flashattn.Window { return &flashattn.Window{Left: l, Right: r} }
	nan := float32(math.NaN())
	type vcase struct {
		name    string
		q, k, v Tensor
		opts    *Options
		arg     string // the ArgError's Arg; "" = valid
		want    string // substring of its message
		root    bool   // a rule of package flashattn: Forward returns the same error
	}
	cases := []vcase{
		{name: "ok", q: q, k: k, v: v},
		{name: "ok causal window softcap", q: q, k: k, v: v, opts: fo(flashattn.Options{Causal: true, Window: win(5, -1), Softcap: 30})},
		{name: "ok cpu knobs", q: q, k: k, v: v, opts: fo(flashattn.Options{Workers: 3, BlockQ: 64, BlockK: 32, Seed: 9})},
		{name: "ok empty alibi", q: q, k: k, v: v, opts: fo(flashattn.Options{ALiBi: []float32{}})},
		{"empty sinks", q, k, v, fo(flashattn.Options{Sinks: []float32{}}), "Options.Sinks", "0 logits", true},
		{"nil buffer", Tensor{DType: BF16, Batch: 2, Seq: 77, Heads: 8, Dim: 64}, k, v, nil, "q", "no buffer", false},
		{"short buffer", Tensor{Buf: &Buffer{ptr: 1, n: 100}, DType: BF16, Batch: 2, Seq: 77, Heads: 8, Dim: 64}, k, v, nil, "q", "needs", false},
		{"zero dim", fakeTensor(BF16, 2, 0, 8, 64), k, v, nil, "q", "≥ 1", false},
		{"types differ", fakeTensor(F16, 2, 77, 8, 64), k, v, nil, "k", "one type", false},
		{"bad type", fakeTensor(DType(7), 2, 77, 8, 64), k, v, nil, "q", "bfloat16 and float16", false},
		{"zero type", fakeTensor(0, 2, 77, 8, 64), k, v, nil, "q", "bfloat16 and float16", false},
		{"v shape", q, k, fakeTensor(BF16, 2, 130, 2, 64), nil, "v", "want k's", false},
		{"batch", q, fakeTensor(BF16, 3, 131, 2, 64), fakeTensor(BF16, 3, 131, 2, 64), nil, "k", "batch 3", true},
		{"dim", q, fakeTensor(BF16, 2, 131, 2, 128), fakeTensor(BF16, 2, 131, 2, 128), nil, "k", "head dim 128", false},
		{"gqa", q, fakeTensor(BF16, 2, 131, 3, 64), fakeTensor(BF16, 2, 131, 3, 64), nil, "k", "not a multiple", true},
		{"headdim 96", fakeTensor(BF16, 1, 8, 1, 96), fakeTensor(BF16, 1, 8, 1, 96), fakeTensor(BF16, 1, 8, 1, 96), nil, "q", "not supported by package gpu", false},
		{"mla", q, k, fakeTensor(BF16, 2, 131, 2, 128), nil, "v", "needs them equal", false},
		{"heads", fakeTensor(BF16, 1, 8, 65536, 64), fakeTensor(BF16, 1, 8, 1, 64), fakeTensor(BF16, 1, 8, 1, 64), nil, "q", "at most 65535", false},
		{"batch 65536", fakeTensor(BF16, 65536, 1, 1, 64), fakeTensor(BF16, 65536, 1, 1, 64), fakeTensor(BF16, 65536, 1, 1, 64), nil, "q", "at most 65535", false},
		{"long q", fakeTensor(BF16, 1, 1<<28, 1, 64), fakeTensor(BF16, 1, 8, 1, 64), fakeTensor(BF16, 1, 8, 1, 64), nil, "q", "2^28", false},
		{"long k", fakeTensor(BF16, 1, 8, 1, 64), fakeTensor(BF16, 1, 1<<28, 1, 64), fakeTensor(BF16, 1, 1<<28, 1, 64), nil, "k", "2^28", false},
		{"many rows", fakeTensor(BF16, 16, 1<<27, 1, 64), fakeTensor(BF16, 16, 8, 1, 64), fakeTensor(BF16, 16, 8, 1, 64), nil, "q", "2^31-1", false},
		{"scale nan", q, k, v, fo(flashattn.Options{Scale: nan}), "Options.Scale", "Scale", true},
		{"scale negative", q, k, v, fo(flashattn.Options{Scale: -1}), "Options.Scale", "Scale", true},
		{"softcap inf", q, k, v, fo(flashattn.Options{Softcap: float32(math.Inf(1))}), "Options.Softcap", "Softcap", true},
		{"softcap overflow", q, k, v, fo(flashattn.Options{Softcap: 1e-45}), "Options.Softcap", "overflows", false},
		{"window", q, k, v, fo(flashattn.Options{Window: win(-2, 0)}), "Options.Window", "Window", true},
		{"workers", q, k, v, fo(flashattn.Options{Workers: -1}), "Options.Workers", "Workers", true},
		{"varlen batch", q, k, v, fo(flashattn.Options{VarLen: &flashattn.VarLen{CuSeqlensQ: []int32{0, 77}, CuSeqlensK: []int32{0, 131}}}), "q", "Batch 1", true},
	}
	// Options the GPU kernels do not implement are refused by name.
	for name, o := range map[string]flashattn.Options{
		"TopLeft":         {TopLeft: true},
		"Offsets":         {Offsets: &flashattn.Offsets{}},
		"Sinks":           {Sinks: make([]float32, 8)},
		"ALiBi":           {ALiBi: make([]float32, 8)},
		"Dropout":         {Dropout: 0.1},
		"KVCache":         {KVCache: &flashattn.KVCache{SeqLens: []int32{1, 1}}},
		"BlockMask":       {BlockMask: &flashattn.BlockMask{}},
		"Mask":            {Mask: flashattn.PrefixLM(3)},
		"ScoreMod":        {ScoreMod: flashattn.ScoreFunc(func(b, h, q, kv int, x float32) (float32, float32) { return x, 1 })},
		"VarLen.SeqUsedQ": {VarLen: &flashattn.VarLen{CuSeqlensQ: []int32{0, 154}, CuSeqlensK: []int32{0, 262}, SeqUsedQ: []int32{1}}},
	} {
		cases = append(cases, vcase{"unsupported " + name, q, k, v, fo(o), "Options." + name, "Options." + name + " is not supported by package gpu", false})
	}
	vq := fakeTensor(F16, 1, 100, 4, 128)
	vk := fakeTensor(F16, 1, 60, 4, 128)
	vl := func(cq, ck, used []int32) *Options {
		return fo(flashattn.Options{VarLen: &flashattn.VarLen{CuSeqlensQ: cq, CuSeqlensK: ck, SeqUsedK: used}})
	}
	many := make([]int32, 65537)
	for i := range many {
		many[i] = int32(i)
	}
	cases = append(cases, []vcase{
		{name: "varlen ok", q: vq, k: vk, v: vk, opts: vl([]int32{0, 30, 30, 100}, []int32{0, 20, 50, 60}, []int32{20, 0, 3})},
		{"varlen short", vq, vk, vk, vl([]int32{0}, []int32{0}, nil), "Options.VarLen.CuSeqlensQ", "batch+1", true},
		{"varlen start", vq, vk, vk, vl([]int32{1, 100}, []int32{0, 60}, nil), "Options.VarLen.CuSeqlensQ", "want 0", true},
		{"varlen decreasing", vq, vk, vk, vl([]int32{0, 50, 40, 100}, []int32{0, 20, 50, 60}, nil), "Options.VarLen.CuSeqlensQ", "decreases", true},
		{"varlen end", vq, vk, vk, vl([]int32{0, 99}, []int32{0, 60}, nil), "Options.VarLen.CuSeqlensQ", "ends at", true},
		{"varlen end k", vq, vk, vk, vl([]int32{0, 100}, []int32{0, 61}, nil), "Options.VarLen.CuSeqlensK", "ends at", true},
		{"varlen counts", vq, vk, vk, vl([]int32{0, 50, 100}, []int32{0, 60}, nil), "Options.VarLen.CuSeqlensQ", "equal length", true},
		{"varlen used len", vq, vk, vk, vl([]int32{0, 100}, []int32{0, 60}, []int32{1, 2}), "Options.VarLen.SeqUsedK", "SeqUsedK has", true},
		{"varlen used range", vq, vk, vk, vl([]int32{0, 100}, []int32{0, 60}, []int32{61}), "Options.VarLen.SeqUsedK", "want 0..60", true},
		{"varlen sequences", fakeTensor(F16, 1, 65536, 4, 128), fakeTensor(F16, 1, 65536, 4, 128), fakeTensor(F16, 1, 65536, 4, 128), vl(many, many, nil), "Options.VarLen.CuSeqlensQ", "at most 65535", false},
	}...)
	for _, c := range cases {
		p, err := validate(c.q, c.k, c.v, c.opts)
		if c.arg == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			} else if p == nil {
				t.Errorf("%s: nil problem", c.name)
			}
			continue
		}
		var ae *flashattn.ArgError
		if !errors.As(err, &ae) || ae.Arg != c.arg || !strings.Contains(ae.Msg, c.want) {
			t.Errorf("%s: error %v (%#v), want an *ArgError for %s containing %q", c.name, err, err, c.arg, c.want)
			continue
		}
		if strings.HasPrefix(ae.Msg, "gpu:") || strings.HasPrefix(ae.Msg, "flashattn:") {
			t.Errorf("%s: message %q carries a prefix", c.name, ae.Msg)
		}
		if c.root {
			o := c.opts
			if o == nil {
				o = &Options{}
			}
			host := func(x Tensor) flashattn.Tensor {
				return flashattn.Dense(make([]float32, x.Len()), x.Batch, x.Seq, x.Heads, x.Dim)
			}
			_, _, rerr := flashattn.Forward(host(c.q), host(c.k), host(c.v), &o.Options)
			if rerr == nil || rerr.Error() != err.Error() {
				t.Errorf("%s: package gpu says %q, flashattn.Forward %v", c.name, err, rerr)
			}
		}
	}
}

// ValidateShape gives, without tensors or a device, the errors and the
// acceptance the calls give.
func TestValidateShape(t *testing.T) {
	s := flashattn.Shape{Batch: 2, Heads: 8, KVHeads: 2, SeqQ: 77, SeqK: 131, Dim: 64}
	if err := ValidateShape(s, nil); err != nil {
		t.Fatal(err)
	}
	if err := ValidateShape(s, &Options{Options: flashattn.Options{Causal: true}, Deterministic: true}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s    flashattn.Shape
		o    *Options
		arg  string
		same bool // flashattn.ValidateShape says the same
	}{
		{flashattn.Shape{Batch: 2, Heads: 8, KVHeads: 3, SeqQ: 7, SeqK: 7, Dim: 64}, nil, "k", true},
		{flashattn.Shape{Batch: 0, Heads: 8, SeqQ: 7, SeqK: 7, Dim: 64}, nil, "shape", true},
		{s, fo(flashattn.Options{Scale: -2}), "Options.Scale", true},
		{s, fo(flashattn.Options{VarLen: &flashattn.VarLen{CuSeqlensQ: []int32{0, 77}, CuSeqlensK: []int32{0, 131}}}), "q", true},
		{flashattn.Shape{Batch: 1, Heads: 8, SeqQ: 77, SeqK: 131, Dim: 64}, fo(flashattn.Options{VarLen: &flashattn.VarLen{CuSeqlensQ: []int32{0, 70}, CuSeqlensK: []int32{0, 131}}}), "Options.VarLen.CuSeqlensQ", true},
		{s, fo(flashattn.Options{ALiBi: []float32{1}}), "Options.ALiBi", false},
		{flashattn.Shape{Batch: 1, Heads: 1, SeqQ: 7, SeqK: 7, Dim: 80}, nil, "q", false},
		{flashattn.Shape{Batch: 1, Heads: 1, SeqQ: 7, SeqK: 7, Dim: 64, DimV: 128}, nil, "v", false},
	} {
		err := ValidateShape(c.s, c.o)
		var ae *flashattn.ArgError
		if !errors.As(err, &ae) || ae.Arg != c.arg {
			t.Errorf("ValidateShape(%+v, %+v) = %v, want an *ArgError for %s", c.s, c.o, err, c.arg)
			continue
		}
		if c.same {
			o := c.o
			if o == nil {
				o = &Options{}
			}
			if rerr := flashattn.ValidateShape(c.s, &o.Options); rerr == nil || rerr.Error() != err.Error() {
				t.Errorf("ValidateShape(%+v): gpu %v, flashattn %v", c.s, err, rerr)
			}
		}
	}
}

// The problem's derived values: scale, softcap constants, mask bounds, and
// varlen geometry.
func TestProblemValues(t *testing.T) {
	q, k := fakeTensor(BF16, 2, 77, 8, 64), fakeTensor(BF16, 2, 131, 2, 64)
	p, err := validate(q, k, k, fo(flashattn.Options{Causal: true, Window: &flashattn.Window{Left: 9, Right: 4}, Softcap: 20}))
	if err != nil {
		t.Fatal(err)
	}
	if p.scale != 0.125 || p.left != 9 || p.right != 0 || !p.softcap {
		t.Errorf("scale %v left %d right %d softcap %v", p.scale, p.left, p.right, p.softcap)
	}
	if p, _ := validate(q, k, k, fo(flashattn.Options{Window: &flashattn.Window{Left: 1 << 30, Right: 208}})); p.left != -1 || p.right != -1 {
		t.Errorf("huge window sides: left %d right %d, want both unbounded (-1)", p.left, p.right)
	}
	if p, _ := validate(q, k, k, fo(flashattn.Options{Window: &flashattn.Window{Left: 207, Right: 0}})); p.left != 207 || p.right != 0 {
		t.Errorf("window sides: left %d right %d", p.left, p.right)
	}
	if math.Abs(float64(p.capScale)-0.125/20) > 1e-9 || math.Abs(float64(p.capLog2)-20*math.Log2E) > 1e-5 {
		t.Errorf("capScale %v capLog2 %v", p.capScale, p.capLog2)
	}
	if p.lseLen() != 2*8*77 || p.maxSq != 77 || p.maxSk != 131 || p.rowsQ != 154 {
		t.Errorf("lseLen %d maxSq %d maxSk %d rowsQ %d", p.lseLen(), p.maxSq, p.maxSk, p.rowsQ)
	}
	vq, vk := fakeTensor(F16, 1, 100, 4, 128), fakeTensor(F16, 1, 60, 4, 128)
	p, err = validate(vq, vk, vk, fo(flashattn.Options{VarLen: &flashattn.VarLen{CuSeqlensQ: []int32{0, 30, 30, 100}, CuSeqlensK: []int32{0, 20, 50, 60}}}))
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
		{"fwdsplit", p.fwdSplitArgs(1, 2, 3, 4, 5, 0, 3), tile.FwdSplitParams},
		{"combine", p.combineArgs(1, 2, 3, 4, 0, 3), tile.CombineParams},
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
	sa, ca := p.fwdSplitArgs(1, 2, 3, 4, 5, 0, 3), p.combineArgs(1, 2, 3, 4, 0, 3)
	if sa["splits"] != 3 || sa["split_rows"] != 2*8*77 || sa["lse_bs"] != 8*77 || ca["split_rows"] != 2*8*77 || ca["o_bs"] != 77*8*64 || ca["o_rs"] != 8*64 {
		t.Errorf("split strides: %v %v", sa, ca)
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
			n := ptxName(dt)
			names := []string{tile.FwdConfig(d).Name(n), tile.FwdSplitConfig(d).Name(n), tile.CombineName(n, d), tile.PreName(n), tile.ConvertName(n)}
			if tile.BwdConfig(d).Check() == nil {
				names = append(names, tile.BwdConfig(d).Name(n, true), tile.BwdConfig(d).Name(n, false), tile.DQConfig(d).Name(n))
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
	// gpu.DType is half.Format, whose values package flashattn's DType shares.
	for _, c := range []struct {
		dt   DType
		root flashattn.DType
	}{{BF16, flashattn.BFloat16}, {F16, flashattn.Float16}} {
		if f, ok := c.root.Format(); !ok || f != c.dt || !c.dt.Valid() {
			t.Errorf("%v: flashattn's %v has format %v", c.dt, c.root, f)
		}
	}
	if ptxName(BF16) != "bf16" || ptxName(F16) != "f16" || moduleFile(F16, 128) != "ptx/attn_f16_d128.ptx" {
		t.Error("PTX names")
	}
	if BF16.String() != "bfloat16" || F16.String() != "float16" {
		t.Error("String")
	}
}
