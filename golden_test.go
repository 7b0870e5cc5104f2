package flashattn

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/flashattn/flashattn/half"
	"github.com/flashattn/flashattn/internal/kernel"
)

// golden_test.go pins the bits of every output of a fixed set of calls —
// every option family, every kernel path, decoding — so that a change meant
// to move code without changing arithmetic (a refactoring) is checked bit
// for bit. A change that is meant to change the arithmetic (a new kernel, a
// new tiling) regenerates the file with
//
//	go test -run TestGoldenHashes -golden.update
//
// and says so in its commit message. Hashes are recorded per architecture
// (the compiler fuses multiply-adds on arm64, so even the pure-Go path's
// bits differ from amd64's) and per kernel path; paths this CPU lacks are
// reported, not checked.

var goldenUpdate = flag.Bool("golden.update", false, "rewrite testdata/golden_hashes.txt from this run")

const goldenFile = "testdata/golden_hashes.txt"

// goldenCase is one call (or forward+backward pair) with fixed inputs.
type goldenCase struct {
	name string
	half bool // a 16-bit case: run once per 16-bit product path
	run  func(t *testing.T, dt DType) map[string][]byte
}

// goldenRand fills n values from a fixed stream, scaled by s.
func goldenRand(seed uint64, n int, s float32) []float32 {
	r := rand.New(rand.NewPCG(seed, 99))
	x := make([]float32, n)
	for i := range x {
		x[i] = s * float32(r.NormFloat64())
	}
	return x
}

// goldenTensor makes a dense tensor of type dt from goldenRand values.
func goldenTensor(dt DType, seed uint64, s float32, b, n, h, d int) Tensor {
	x := goldenRand(seed, b*n*h*d, s)
	switch dt {
	case BFloat16:
		y := make([]half.BF16, len(x))
		for i, v := range x {
			y[i] = half.NewBF16(v)
		}
		return DenseOf(y, b, n, h, d)
	case Float16:
		y := make([]half.F16, len(x))
		for i, v := range x {
			y[i] = half.NewF16(v)
		}
		return DenseOf(y, b, n, h, d)
	}
	return Dense(x, b, n, h, d)
}

// tensorBytes returns a copy of the raw bytes of t's data field, whatever
// its type: the field its formats row reads.
func tensorBytes(t Tensor) []byte {
	raw, _ := formats[t.DType()].raw(t)
	return slices.Clone(raw)
}

func floatBytes(x []float32) []byte { return tensorBytes(Tensor{Data: x}) }

// fwdBwd runs Forward then Backward and returns every output.
func fwdBwd(t *testing.T, q, k, v Tensor, opts *Options, doSeed uint64) map[string][]byte {
	t.Helper()
	out, lse, err := Forward(q, k, v, opts)
	if err != nil {
		t.Fatal(err)
	}
	do := goldenTensor(q.DType(), doSeed, 1, q.Batch, q.Seq, q.Heads, q.Dim)
	dq, dk, dv, err := Backward(q, k, v, out, do, lse, opts)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"O": tensorBytes(out), "LSE": floatBytes(lse),
		"dQ": tensorBytes(dq), "dK": tensorBytes(dk), "dV": tensorBytes(dv)}
}

// fwdOnly runs Forward and returns its outputs.
func fwdOnly(t *testing.T, q, k, v Tensor, opts *Options) map[string][]byte {
	t.Helper()
	out, lse, err := Forward(q, k, v, opts)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"O": tensorBytes(out), "LSE": floatBytes(lse)}
}

func goldenRope(maxPos, dim int) *Rotary {
	r := &Rotary{Dim: dim, Cos: make([]float32, maxPos*dim/2), Sin: make([]float32, maxPos*dim/2)}
	for p := 0; p < maxPos; p++ {
		for i := 0; i < dim/2; i++ {
			th := float64(p) * math.Pow(10000, -2*float64(i)/float64(dim))
			r.Cos[p*dim/2+i], r.Sin[p*dim/2+i] = float32(math.Cos(th)), float32(math.Sin(th))
		}
	}
	return r
}

// decodeCase builds a KV-cache call (8 query heads on 2 KV heads) and
// returns O, LSE and the cache after the append.
func decodeCase(t *testing.T, cacheType DType, paged bool, splits, sq int, causal bool) map[string][]byte {
	return decodeCaseHeads(t, cacheType, paged, splits, sq, causal, 2)
}

// decodeCaseHeads is decodeCase with Hk KV heads.
func decodeCaseHeads(t *testing.T, cacheType DType, paged bool, splits, sq int, causal bool, Hk int) map[string][]byte {
	t.Helper()
	const B, H, D, capacity, block = 2, 8, 64, 160, 16
	q := goldenTensor(Float32, 31, 1, B, sq, H, D)
	var kc, vc Tensor
	var c KVCache
	if paged {
		nb := 2 * capacity / block
		kc, vc = NewTensorOf(cacheType, nb, block, Hk, D), NewTensorOf(cacheType, nb, block, Hk, D)
		c.BlocksPerSeq = capacity / block
		c.BlockTable = make([]int32, B*c.BlocksPerSeq)
		for i := range c.BlockTable {
			c.BlockTable[i] = int32((i*7 + 3) % nb) // a permutation of the blocks
		}
	} else {
		kc, vc = NewTensorOf(cacheType, B, capacity, Hk, D), NewTensorOf(cacheType, B, capacity, Hk, D)
	}
	if formats[cacheType].scaled { // fp8: a per-tensor scale other than 1
		kc.Scale, vc.Scale = 0.5, 0.25
	}
	kf, vf := goldenTensor(Float32, 32, 1, kc.Batch, kc.Seq, Hk, D), goldenTensor(Float32, 33, 1, vc.Batch, vc.Seq, Hk, D)
	if err := Convert(kc, kf); err != nil {
		t.Fatal(err)
	}
	if err := Convert(vc, vf); err != nil {
		t.Fatal(err)
	}
	c.SeqLens = []int32{100, 37}
	c.KNew, c.VNew = goldenTensor(Float32, 34, 1, B, sq, Hk, D), goldenTensor(Float32, 35, 1, B, sq, Hk, D)
	c.Rotary = goldenRope(capacity, D)
	c.NumSplits = splits
	res := fwdOnly(t, q, kc, vc, &Options{Causal: causal, KVCache: &c})
	res["Kcache"], res["Vcache"] = tensorBytes(kc), tensorBytes(vc)
	return res
}

var goldenCases = []goldenCase{
	{name: "gqa", run: func(t *testing.T, _ DType) map[string][]byte {
		q, k, v := goldenTensor(Float32, 1, 1, 2, 77, 4, 40), goldenTensor(Float32, 2, 1, 2, 93, 2, 40), goldenTensor(Float32, 3, 1, 2, 93, 2, 40)
		return fwdBwd(t, q, k, v, nil, 4)
	}},
	{name: "causal-window-softcap-alibi", run: func(t *testing.T, _ DType) map[string][]byte {
		q, k, v := goldenTensor(Float32, 5, 1, 1, 130, 2, 64), goldenTensor(Float32, 6, 1, 1, 150, 1, 64), goldenTensor(Float32, 7, 1, 1, 150, 1, 64)
		return fwdBwd(t, q, k, v, &Options{Causal: true, Window: &Window{Left: 40, Right: -1}, Softcap: 5, ALiBi: []float32{0.25, 0.0625}}, 8)
	}},
	{name: "dropout", run: func(t *testing.T, _ DType) map[string][]byte {
		q, k, v := goldenTensor(Float32, 9, 1, 1, 70, 2, 32), goldenTensor(Float32, 10, 1, 1, 70, 2, 32), goldenTensor(Float32, 11, 1, 1, 70, 2, 32)
		return fwdBwd(t, q, k, v, &Options{Dropout: 0.2, Seed: 7}, 12)
	}},
	{name: "varlen", run: func(t *testing.T, _ DType) map[string][]byte {
		q, k, v := goldenTensor(Float32, 13, 1, 1, 90, 3, 24), goldenTensor(Float32, 14, 1, 1, 140, 1, 24), goldenTensor(Float32, 15, 1, 1, 140, 1, 24)
		vl := &VarLen{CuSeqlensQ: []int32{0, 30, 31, 90}, CuSeqlensK: []int32{0, 50, 52, 140}, SeqUsedK: []int32{45, 2, 80}}
		return fwdBwd(t, q, k, v, &Options{Causal: true, VarLen: vl}, 16)
	}},
	{name: "blockmask-mask-scoremod", run: func(t *testing.T, _ DType) map[string][]byte {
		const N = 200
		q, k, v := goldenTensor(Float32, 17, 1, 1, N, 2, 32), goldenTensor(Float32, 18, 1, 1, N, 2, 32), goldenTensor(Float32, 19, 1, 1, N, 2, 32)
		bm, err := BigBird(BlockShape{Batch: 1, Heads: 1, SeqQ: N, SeqK: N, BlockQ: 32, BlockK: 32}, 1, 1, 1, 5)
		if err != nil {
			t.Fatal(err)
		}
		lg, err := LocalGlobal(50, 3)
		if err != nil {
			t.Fatal(err)
		}
		sm := ScoreFunc(func(b, h, q, kv int, x float32) (float32, float32) {
			return x + 0.01*float32(h+1)*float32(q-kv)/float32(N), 1
		})
		return fwdBwd(t, q, k, v, &Options{BlockMask: bm, Mask: lg, ScoreMod: sm}, 20)
	}},
	{name: "documents-bhsd", run: func(t *testing.T, _ DType) map[string][]byte {
		const B, N, H, D = 2, 90, 2, 16
		ids := make([]int32, B*N)
		for i := range ids {
			ids[i] = int32(i % N / 25)
		}
		docs, err := Documents(ids, ids, N, N)
		if err != nil {
			t.Fatal(err)
		}
		bhsd := func(seed uint64) Tensor { // PyTorch's [B, H, S, D]
			return Tensor{Data: goldenRand(seed, B*N*H*D, 1), Batch: B, Seq: N, Heads: H, Dim: D,
				BatchStride: H * N * D, SeqStride: D, HeadStride: N * D}
		}
		return fwdBwd(t, bhsd(21), bhsd(22), bhsd(23), &Options{Causal: true, Mask: docs}, 24)
	}},
	{name: "large-logits", run: func(t *testing.T, _ DType) map[string][]byte {
		q, k, v := goldenTensor(Float32, 25, 30, 1, 40, 2, 64), goldenTensor(Float32, 26, 1, 1, 70, 2, 64), goldenTensor(Float32, 27, 1, 1, 70, 2, 64)
		return fwdBwd(t, q, k, v, &Options{Causal: true}, 28)
	}},
	{name: "decode-long-split", run: func(t *testing.T, _ DType) map[string][]byte {
		q, k, v := goldenTensor(Float32, 29, 1, 1, 1, 4, 64), goldenTensor(Float32, 30, 1, 1, 3000, 2, 64), goldenTensor(Float32, 36, 1, 1, 3000, 2, 64)
		return fwdOnly(t, q, k, v, nil)
	}},
	{name: "decode-cache-f32", run: func(t *testing.T, _ DType) map[string][]byte { return decodeCase(t, Float32, false, 0, 1, false) }},
	{name: "decode-paged-splits", run: func(t *testing.T, _ DType) map[string][]byte { return decodeCase(t, Float32, true, 3, 2, true) }},
	{name: "decode-cache-bf16", run: func(t *testing.T, _ DType) map[string][]byte { return decodeCase(t, BFloat16, true, 0, 1, false) }},
	{name: "decode-cache-f16", run: func(t *testing.T, _ DType) map[string][]byte { return decodeCase(t, Float16, false, 0, 1, false) }},
	{name: "decode-cache-q8", run: func(t *testing.T, _ DType) map[string][]byte { return decodeCase(t, Q8_0, false, 2, 1, false) }},
	{name: "decode-cache-q4", run: func(t *testing.T, _ DType) map[string][]byte { return decodeCase(t, Q4_0, true, 0, 2, true) }},
	{name: "decode-cache-e4m3", run: func(t *testing.T, _ DType) map[string][]byte { return decodeCase(t, FP8E4M3, false, 2, 1, false) }},
	{name: "decode-cache-e5m2", run: func(t *testing.T, _ DType) map[string][]byte { return decodeCase(t, FP8E5M2, true, 0, 2, true) }},
	{name: "decode-gqa8-bf16", run: func(t *testing.T, _ DType) map[string][]byte { // 8 query rows per KV head: the native bf16 decode tiles
		return decodeCaseHeads(t, BFloat16, false, 0, 1, false, 1)
	}},
	{name: "decode-mha-bf16", run: func(t *testing.T, _ DType) map[string][]byte {
		return decodeCaseHeads(t, BFloat16, false, 0, 1, false, 8)
	}},
	{name: "decode-mha-q8-paged", run: func(t *testing.T, _ DType) map[string][]byte {
		return decodeCaseHeads(t, Q8_0, true, 0, 1, false, 8)
	}},
	{name: "half-causal", half: true, run: func(t *testing.T, dt DType) map[string][]byte {
		q, k, v := goldenTensor(dt, 37, 1, 1, 61, 4, 48), goldenTensor(dt, 38, 1, 1, 67, 2, 48), goldenTensor(dt, 39, 1, 1, 67, 2, 48)
		return fwdBwd(t, q, k, v, &Options{Causal: true}, 40)
	}},
	{name: "half-odd-dim", half: true, run: func(t *testing.T, dt DType) map[string][]byte {
		q, k, v := goldenTensor(dt, 41, 1, 2, 33, 2, 33), goldenTensor(dt, 42, 1, 2, 45, 2, 33), goldenTensor(dt, 43, 1, 2, 45, 2, 33)
		return fwdBwd(t, q, k, v, &Options{Softcap: 3}, 44)
	}},
}

// goldenF32Inner is the inner name of the "f32" 16-bit path in the keys:
// the best float32 kernels, which that path ran when the hashes were
// recorded. (It now runs the float32 kernels of its set, the key's <impl>;
// the attention core never multiplies through it, so the bits are the
// same, and the keys stay as recorded.)
var goldenF32Inner = kernel.Available()[0].Name

// goldenPaths lists (key prefix, kernel.Force spec) pairs: every float32
// kernel (with the decode kernels of the same name), for 16-bit cases
// every float32 kernel × every 16-bit path, and for the decode cases also
// every decode set that no float32 kernel is named after ("avx512bf16"),
// with the best float32 kernels.
func goldenPaths(c goldenCase) (keys []string, specs []string, dts []DType) {
	if strings.HasPrefix(c.name, "decode-") {
		for _, dk := range kernel.DecodeAvailable() {
			if _, err := kernel.Lookup(dk.Name); err != nil {
				keys = append(keys, "f32/"+dk.Name)
				specs = append(specs, "f32="+kernel.Available()[0].Name+",decode="+dk.Name)
				dts = append(dts, Float32)
			}
		}
	}
	for _, im := range kernel.Available() {
		if !c.half {
			keys = append(keys, "f32/"+im.Name)
			specs = append(specs, kernelSpec(im.Name))
			dts = append(dts, Float32)
			continue
		}
		for _, dt := range []DType{BFloat16, Float16} {
			for _, hp := range kernel.HalfAvailable(dt.elem()) {
				name := hp.Name
				if name == "f32" {
					name += "(" + goldenF32Inner + ")"
				}
				keys = append(keys, fmt.Sprintf("%v/%s/%s", dt, im.Name, name))
				specs = append(specs, kernelSpec(im.Name)+","+dt.elem().String()+"="+hp.Name)
				dts = append(dts, dt)
			}
		}
	}
	return keys, specs, dts
}

func readGolden(t *testing.T) map[string]string {
	f, err := os.Open(goldenFile)
	if err != nil {
		if *goldenUpdate {
			return map[string]string{}
		}
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("%s: bad line %q", goldenFile, line)
		}
		m[k] = v
	}
	return m
}

// TestGoldenHashes checks the outputs of goldenCases bit for bit against
// the recorded hashes, on every kernel path this CPU has.
func TestGoldenHashes(t *testing.T) {
	if testing.Short() {
		t.Skip("golden hashes: not in -short")
	}
	old := cacheSizes
	cacheSizes = func() (int, int) { return 32 << 10, 1 << 20 } // tiles as on a 1 MiB-L2 core
	defer func() { cacheSizes = old }()
	want := readGolden(t)
	got := map[string]string{}
	checked, missing := 0, 0
	for _, c := range goldenCases {
		keys, specs, dts := goldenPaths(c)
		for i, key := range keys {
			t.Run(c.name+"/"+key, func(t *testing.T) {
				forceKernels(t, specs[i])
				res := c.run(t, dts[i])
				names := make([]string, 0, len(res))
				for n := range res {
					names = append(names, n)
				}
				slices.Sort(names)
				for _, n := range names {
					sum := sha256.Sum256(res[n])
					id := runtime.GOARCH + "/" + c.name + "/" + key + "/" + n
					h := hex.EncodeToString(sum[:12])
					got[id] = h
					w, ok := want[id]
					switch {
					case *goldenUpdate:
					case !ok:
						missing++
						t.Logf("%s: not recorded (a kernel path the recording machine lacked)", id)
					case w != h:
						t.Errorf("%s: hash %s, recorded %s: the bits changed", id, h, w)
					default:
						checked++
					}
				}
			})
		}
	}
	if *goldenUpdate {
		for k, v := range want { // keep what this CPU cannot produce
			if _, ok := got[k]; !ok {
				got[k] = v
			}
		}
		keys := make([]string, 0, len(got))
		for k := range got {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var b strings.Builder
		b.WriteString("# SHA-256 (first 12 bytes) of the bits of each output of golden_test.go's calls.\n")
		b.WriteString("# arch/case/type/kernel[/16-bit path]/output hash. Regenerate: go test -run TestGoldenHashes -golden.update\n")
		for _, k := range keys {
			fmt.Fprintf(&b, "%s %s\n", k, got[k])
		}
		if err := os.WriteFile(goldenFile, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Logf("%d outputs checked, %d not recorded", checked, missing)
	if checked == 0 {
		t.Fatal("no recorded hash matched a path of this CPU: the generic path's are always recorded")
	}
}

// TestGoldenBytesEveryDType: the bytes the golden hashes cover are the
// stored bytes of a tensor of every type — an empty slice would make its
// hash one that cannot change.
func TestGoldenBytesEveryDType(t *testing.T) {
	for dt := range numDTypes {
		x := NewTensorOf(dt, 1, 2, 1, 64)
		if got, want := len(tensorBytes(x)), formats[dt].bytes(x.Len()); got != want || got == 0 {
			t.Errorf("%v: golden bytes of a %d-element tensor: %d bytes, want %d", dt, x.Len(), got, want)
		}
	}
}
