package flashattn

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/flashattn/flashattn/internal/kernel"
)

// TestDecodeGroupHeads: decoding one token with grouped-query attention
// (H query heads on Hk KV heads, m = H/Hk rows per KV head: the kernels
// that read every KV head of a key side by side for m = 1, 2, 4, 8 and Hk
// a multiple of a scores block's 16/m heads) gives, bit for bit, what each
// KV head's query heads give alone (one KV head: the one-head kernels),
// for float32, bf16, fp16 and q8_0 caches, with key counts that are and are not
// multiples of the kernels' key blocks, with group sizes and KV head
// counts the kernels take and others (m = 3; 3 KV heads of 8 rows; 12
// rows, on avx512bf16 bf16's native Scores by tiles of keys), on every
// decode kernel set.
func TestDecodeGroupHeads(t *testing.T) {
	const D, capacity = 64, 700
	for _, sh := range []struct{ H, Hk int }{{16, 4}, {16, 8}, {16, 2}, {8, 8}, {24, 3}, {12, 4}, {48, 4}} {
		H, Hk := sh.H, sh.Hk
		g := H / Hk
		q := goldenTensor(Float32, 41, 1, 1, 1, H, D)
		kf, vf := goldenTensor(Float32, 42, 1, 1, capacity, Hk, D), goldenTensor(Float32, 43, 1, 1, capacity, Hk, D)
		for _, dk := range kernel.DecodeAvailable() {
			for _, dt := range []DType{Float32, BFloat16, Float16, Q8_0} {
				for _, n := range []int{capacity, 613, 5} {
					t.Run(fmt.Sprintf("H=%d/Hk=%d/%s/%v/n=%d", H, Hk, dk.Name, dt, n), func(t *testing.T) {
						forceKernels(t, "decode="+dk.Name)
						all := decodeOne(t, q, headsOf(t, dt, kf, 0, Hk), headsOf(t, dt, vf, 0, Hk), n)
						for hk := 0; hk < Hk; hk++ {
							one := decodeOne(t, headsOf(t, Float32, q, hk*g, g), headsOf(t, dt, kf, hk, 1), headsOf(t, dt, vf, hk, 1), n)
							want := tensorBytes(one)
							got := tensorBytes(all)[hk*g*D*4 : (hk+1)*g*D*4]
							if !bytes.Equal(got, want) {
								t.Fatalf("KV head %d: O differs from its query heads decoded alone", hk)
							}
						}
					})
				}
			}
		}
	}
}

// headsOf returns heads h0..h0+n-1 of the dense float32 x as a tensor of
// type dt.
func headsOf(t *testing.T, dt DType, x Tensor, h0, n int) Tensor {
	t.Helper()
	f := NewTensor(x.Batch, x.Seq, n, x.Dim)
	for s := 0; s < x.Seq; s++ {
		for h := 0; h < n; h++ {
			copy(f.Data[(s*n+h)*x.Dim:(s*n+h+1)*x.Dim], x.Data[(s*x.Heads+h0+h)*x.Dim:])
		}
	}
	out := NewTensorOf(dt, x.Batch, x.Seq, n, x.Dim)
	if err := Convert(out, f); err != nil {
		t.Fatal(err)
	}
	return out
}

// decodeOne decodes the one token q from the caches k, v of n keys.
func decodeOne(t *testing.T, q, k, v Tensor, n int) Tensor {
	t.Helper()
	out, _, err := Forward(q, k, v, &Options{KVCache: &KVCache{SeqLens: []int32{int32(n)}}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDecodeGroupDispatch: a grouped-query decode step takes the
// grouped-query kernels (one ScoresGroup and AccumGroup call per block of
// keys for all KV heads, m rows per head) for every m and KV head count
// whose kernels the set has (GroupFast; on avx512: float32, bf16, fp16 and
// q8_0, m = 2, 4 and 8; on avx512bf16 also bf16 for 8 <= m < 16, the
// native Scores by tiles of keys), and the one-head kernels otherwise.
func TestDecodeGroupDispatch(t *testing.T) {
	const D, n = 128, 900
	for _, dk := range kernel.DecodeAvailable() {
		for _, dt := range []DType{Float32, BFloat16, Float16, Q8_0} {
			for _, sh := range []struct{ H, Hk int }{{16, 8}, {32, 8}, {64, 8}, {16, 2}, {24, 3}, {12, 4}, {48, 4}, {128, 8}} {
				t.Run(fmt.Sprintf("%s/%v/H=%d/Hk=%d", dk.Name, dt, sh.H, sh.Hk), func(t *testing.T) {
					m := sh.H / sh.Hk
					forceKernels(t, "decode="+dk.Name)
					s := *kernel.Active()
					base := s.Decode
					var calls [2]map[int]int // ScoresGroup, AccumGroup calls by m
					calls[0], calls[1] = map[int]int{}, map[int]int{}
					for f := range s.Decode.ScoresGroup {
						if sg, ag := base.ScoresGroup[f], base.AccumGroup[f]; sg != nil {
							s.Decode.ScoresGroup[f] = func(s []float32, lds int, q []float32, m, heads int, k []byte, ldk, hs, n, d int) {
								calls[0][m]++
								sg(s, lds, q, m, heads, k, ldk, hs, n, d)
							}
							s.Decode.AccumGroup[f] = func(o []float32, ldo int, p []float32, ldp, m, heads int, v []byte, ldv, hs, n, d int) {
								calls[1][m]++
								ag(o, ldo, p, ldp, m, heads, v, ldv, hs, n, d)
							}
						}
					}
					t.Cleanup(kernel.ForceSet(&s))
					q := goldenTensor(Float32, 44, 1, 1, 1, sh.H, D)
					k := headsOf(t, dt, goldenTensor(Float32, 45, 1, 1, n, sh.Hk, D), 0, sh.Hk)
					v := headsOf(t, dt, goldenTensor(Float32, 46, 1, 1, n, sh.Hk, D), 0, sh.Hk)
					_, _, err := Forward(q, k, v, &Options{KVCache: &KVCache{SeqLens: []int32{n}}, Workers: 1})
					if err != nil {
						t.Fatal(err)
					}
					kf := formats[dt].kf
					want := base.GroupFast(true, kf, m, sh.Hk) || base.GroupFast(false, kf, m, sh.Hk)
					if got := calls[0][m] > 0 && calls[1][m] > 0; got != want {
						t.Errorf("grouped-query kernels called %d, %d times for m = %d (%d KV heads); want them called: %v", calls[0][m], calls[1][m], m, sh.Hk, want)
					}
					if dk.Name == "avx512" && m <= 8 && sh.Hk%(16/m) == 0 && !base.GroupFast(false, kf, m, sh.Hk) {
						t.Errorf("avx512 has no grouped-query Accum kernel for %v, m = %d", dt, m)
					}
					if dk.Name == "avx512bf16" && dt == BFloat16 && m >= 8 && m < 16 && sh.Hk%max(16/m, 1) == 0 && !base.GroupFast(true, kf, m, sh.Hk) {
						t.Errorf("avx512bf16's bf16 ScoresGroup does not take m = %d (%d KV heads) by key tiles", m, sh.Hk)
					}
				})
			}
		}
	}
}
