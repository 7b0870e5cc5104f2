package flashattn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn/internal/kernel"
	"github.com/flashattn/flashattn/reference"
)

// TestKVCachePagedLeftPadPacked: a prefill with enough query rows that K
// and V are packed once per call (tiling.packs: 40 rows of 2 query heads
// per KV head) over a paged cache whose LeftPad puts groups of kernel.W
// keys across page boundaries: every left pad 0..2W+1, pages of 16 and 32
// keys (the API's page sizes are multiples of 16), every cache type, on
// every kernel path (16-bit caches: every 16-bit product path, paired),
// against the float64 reference (checkKVCase). The pack pass once read W
// keys from one page: a worker panic with a float32 cache, wrong keys with
// 16-bit ones.
func TestKVCachePagedLeftPadPacked(t *testing.T) {
	const sq, cached = 40, 30 // new keys = query rows; 70 keys per call
	for _, dt := range []DType{Float32, BFloat16, Float16, Q8_0, Q4_0, FP8E4M3, FP8E5M2} {
		for _, page := range []int{16, 32} {
			run := func(t *testing.T) {
				for pad := 0; pad <= 2*kernel.W+1; pad++ {
					end := pad + cached
					tc := kvCase{name: fmt.Sprintf("%v/page%d/pad%d", dt, page, pad), b: 1, hq: 4, hk: 2, d: 32,
						capacity: (end + sq + page - 1) / page * page, ends: []int32{int32(end)}, pads: []int32{int32(pad)},
						snew: sq, sq: sq, paged: page, causal: pad%2 == 0, dt: dt, workers: 1 + pad%3}
					t.Run(fmt.Sprintf("pad%d", pad), func(t *testing.T) { checkKVCase(t, tc) })
				}
			}
			t.Run(fmt.Sprintf("%v/page%d", dt, page), func(t *testing.T) {
				if f, ok := dt.Format(); ok {
					forEachKernelHalf(t, DType(f), true, run)
					return
				}
				forEachKernel(t, run)
			})
		}
	}
}

// TestKVCacheLeftPadRotaryPositions: with LeftPad, Rotary rotates the new
// keys and the queries at flash-attn's absolute cache positions (SeqLens[b]
// + i, not SeqLens[b] − LeftPad[b] + i), for every cache type, contiguous
// and paged. The written keys are checked against a float64 rotation at
// those positions (within one step of the cache type), and O and LSE
// against the float64 attention over the cache as it now holds it, with
// the queries rotated in float64 at those positions (rounded to the cache's
// 16-bit type for a 16-bit cache, the rule of KVCache).
func TestKVCacheLeftPadRotaryPositions(t *testing.T) {
	for _, dt := range []DType{Float32, BFloat16, Float16, Q8_0, Q4_0, FP8E4M3, FP8E5M2} {
		for _, paged := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/paged=%v", dt, paged), func(t *testing.T) { checkLeftPadRotary(t, dt, paged) })
		}
	}
}

// TestKVCachePagedLeftPadPackedBits: the packed route gathers a group of
// kernel.W keys that a page boundary cuts without changing a value: a
// prefill over a paged cache with LeftPad p gives the bits of the same
// call over the same keys placed from position 0 (LeftPad 0), for every
// pad 1..W+1, pages of 16, float32, bfloat16 (native products) and q8_0
// caches, on every kernel path. No mask, rotary or new keys: only the
// keys' values matter, not their positions.
func TestKVCachePagedLeftPadPackedBits(t *testing.T) {
	const sq, hq, hk, d, keys, page = 40, 4, 2, 32, 70, 16
	const perSeq = (keys + kernel.W + 1 + page - 1) / page
	r := rand.New(rand.NewPCG(5, 16))
	q := Dense(randSlice(r, sq*hq*d), 1, sq, hq, d)
	logical := [2][]float32{randSlice(r, perSeq*page*hk*d), randSlice(r, perSeq*page*hk*d)} // K, V: [positions, hk, d]
	table := make([]int32, perSeq)
	for i, blk := range r.Perm(perSeq + 2)[:perSeq] {
		table[i] = int32(blk)
	}
	row := hk * d
	// forward runs the prefill over the keys from logical position from on,
	// stored from position pad of a paged cache of type dt.
	forward := func(t *testing.T, dt DType, from, pad int) (Tensor, []float32) {
		var kv [2]Tensor
		for i, l := range logical {
			x := NewTensor(perSeq+2, page, hk, d)
			for pos := pad; pos < pad+keys; pos++ {
				blk := int(table[pos/page])
				copy(x.Data[(blk*page+pos%page)*row:][:row], l[(from+pos-pad)*row:][:row])
			}
			kv[i] = newCache(dt, x.Batch, x.Seq, x.Heads, x.Dim)
			if err := Convert(kv[i], x); err != nil {
				t.Fatal(err)
			}
		}
		c := &KVCache{SeqLens: []int32{int32(pad + keys)}, LeftPad: []int32{int32(pad)}, BlockTable: table, BlocksPerSeq: perSeq}
		out, lse, err := Forward(q, kv[0], kv[1], &Options{KVCache: c})
		if err != nil {
			t.Fatal(err)
		}
		return out, lse
	}
	for _, dt := range []DType{Float32, BFloat16, Q8_0} {
		run := func(t *testing.T) {
			for pad := 1; pad <= kernel.W+1; pad++ {
				wantO, wantL := forward(t, dt, 3, 0)
				gotO, gotL := forward(t, dt, 3, pad)
				if !equalBits(gotO.Data, wantO.Data) || !equalBits(gotL, wantL) {
					t.Errorf("LeftPad %d: O or LSE differ from LeftPad 0's bits over the same keys", pad)
				}
			}
		}
		t.Run(dt.String(), func(t *testing.T) {
			if f, ok := dt.Format(); ok {
				forEachKernelHalf(t, DType(f), true, run)
				return
			}
			forEachKernel(t, run)
		})
	}
}

// cacheStep bounds how far one stored value of dt may be from the value
// x written, where blockMax is the largest magnitude in x's 32-value block.
func cacheStep(dt DType, x, blockMax float64) float64 {
	switch dt {
	case BFloat16:
		return math.Abs(x)*0x1p-8 + 1e-6
	case Float16:
		return math.Abs(x)*0x1p-11 + 1e-6
	case Q8_0:
		return blockMax/127 + 1e-6
	case Q4_0:
		return blockMax/7 + 1e-6
	case FP8E4M3: // 3 significand bits; subnormals step 2⁻⁹ (scale 1)
		return math.Abs(x)*0x1p-4 + 0x1p-10
	case FP8E5M2: // 2 significand bits; subnormals step 2⁻¹⁶
		return math.Abs(x)*0x1p-3 + 0x1p-17
	}
	return 1e-6
}

func checkLeftPadRotary(t *testing.T, dt DType, paged bool) {
	const B, Hq, Hk, D, capacity, block, snew = 2, 4, 2, 64, 128, 32, 3
	ends, pads := []int32{70, 100}, []int32{23, 9}
	r := rand.New(rand.NewPCG(uint64(dt)+7, 25))
	rows, seqs := B, capacity
	var table []int32
	if paged {
		rows, seqs = 2*capacity/block+1, block
		table = make([]int32, B*capacity/block)
		for i, p := range r.Perm(rows)[:len(table)] {
			table[i] = int32(p)
		}
	}
	kc, vc := NewTensorOf(dt, rows, seqs, Hk, D), NewTensorOf(dt, rows, seqs, Hk, D)
	if err := Convert(kc, Dense(randSlice(r, rows*seqs*Hk*D), rows, seqs, Hk, D)); err != nil {
		t.Fatal(err)
	}
	if err := Convert(vc, Dense(randSlice(r, rows*seqs*Hk*D), rows, seqs, Hk, D)); err != nil {
		t.Fatal(err)
	}
	q, knew, vnew := randSlice(r, B*snew*Hq*D), randSlice(r, B*snew*Hk*D), randSlice(r, B*snew*Hk*D)
	rot := ropeTables(capacity+snew, D)
	c := &KVCache{SeqLens: ends, LeftPad: pads, BlockTable: table, BlocksPerSeq: len(table) / B,
		KNew: Dense(append([]float32(nil), knew...), B, snew, Hk, D), VNew: Dense(vnew, B, snew, Hk, D), Rotary: rot}
	out, lse, err := Forward(Dense(q, B, snew, Hq, D), kc, vc, &Options{Causal: true, KVCache: c})
	if err != nil {
		t.Fatal(err)
	}
	kf, vf := NewTensor(rows, seqs, Hk, D), NewTensor(rows, seqs, Hk, D)
	if err := Convert(kf, kc); err != nil {
		t.Fatal(err)
	}
	if err := Convert(vf, vc); err != nil {
		t.Fatal(err)
	}
	// at is cache position j of sequence b, head hk, as the cache holds it.
	at := func(x Tensor, b, j, hk int) []float32 {
		row, pos := b, j
		if paged {
			row, pos = int(table[b*capacity/block+j/block]), j%block
		}
		off := ((row*seqs+pos)*Hk + hk) * D
		return x.Data[off : off+D]
	}
	for b := range B {
		end, pad := int(ends[b]), int(pads[b])
		// The new keys, rotated in float64 at flash-attn's positions end+i.
		bad := ""
		for i := range snew {
			for hk := range Hk {
				want := make([]float64, D)
				w32 := append([]float32(nil), knew[((b*snew+i)*Hk+hk)*D:][:D]...)
				half := D / 2
				for tt := range half {
					cs, sn := float64(rot.Cos[(end+i)*half+tt]), float64(rot.Sin[(end+i)*half+tt])
					a, bb := float64(w32[tt]), float64(w32[tt+half])
					want[tt], want[tt+half] = a*cs-bb*sn, a*sn+bb*cs
				}
				got := at(kf, b, end+i, hk)
				for blk := 0; blk < D; blk += 32 {
					bm := 0.0
					for _, x := range want[blk : blk+32] {
						bm = max(bm, math.Abs(x))
					}
					for dd := blk; dd < blk+32; dd++ {
						if e := math.Abs(float64(got[dd]) - want[dd]); !(e <= cacheStep(dt, want[dd], bm)) && bad == "" {
							bad = fmt.Sprintf("cache position %d head %d dim %d holds %v, want %v (rotated at position %d)", end+i, hk, dd, got[dd], want[dd], end+i)
						}
					}
				}
			}
		}
		if bad != "" {
			t.Errorf("sequence %d: %s", b, bad)
		}
		// Attention over positions pad..end+snew-1 as the cache holds them.
		nk := end + snew - pad
		ek, ev := make([]float32, 0, nk*Hk*D), make([]float32, 0, nk*Hk*D)
		for j := pad; j < end+snew; j++ {
			for hk := range Hk {
				ek, ev = append(ek, at(kf, b, j, hk)...), append(ev, at(vf, b, j, hk)...)
			}
		}
		qb := append([]float32(nil), q[b*snew*Hq*D:(b+1)*snew*Hq*D]...)
		for i := range snew {
			for h := range Hq {
				rope64(qb[(i*Hq+h)*D:][:D], rot, end+i)
			}
		}
		par := reference.Params{Batch: 1, SeqQ: snew, SeqK: nk, Heads: Hq, KVHeads: Hk, HeadDim: D, Causal: true}
		gotO, gotL := out.Data[b*snew*Hq*D:(b+1)*snew*Hq*D], lse[b*Hq*snew:(b+1)*Hq*snew]
		if f, ok := dt.Format(); ok {
			qb = f.RoundSlice(qb)
			o64, l64 := reference.Forward64(par, to64(qb), to64(ek), to64(ev))
			oh, lh := reference.ForwardHalf(par, f, qb, ek, ev)
			if err := reference.CheckHalf("O", f, gotO, oh, o64); err != nil {
				t.Errorf("sequence %d: %v", b, err)
			}
			if err := reference.CheckHalf("LSE", f, gotL, lh, l64); err != nil {
				t.Errorf("sequence %d: %v", b, err)
			}
			continue
		}
		o64, l64 := reference.Forward64(par, to64(qb), to64(ek), to64(ev))
		o32, l32 := reference.Forward32(plainPar(par), qb, ek, ev)
		if err := reference.Check("O", gotO, o32, o64); err != nil {
			t.Errorf("sequence %d: %v", b, err)
		}
		if err := reference.Check("LSE", gotL, l32, l64); err != nil {
			t.Errorf("sequence %d: %v", b, err)
		}
	}
}
