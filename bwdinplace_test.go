package flashattn

import (
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"testing"
)

// TestBackwardReadsFloat32RowsInPlace: a float32 backward whose head dims
// need no padding reads Q and dO where they are instead of packing copies
// of them. Its first call after the pools are emptied allocates the
// packed Kᵀ, Vᵀ and K (3·|K|) and workspaces far smaller than |Q| — less
// than 3·|K| + |Q| in all, where packed Q and dO (2·|Q|) would not fit.
func TestBackwardReadsFloat32RowsInPlace(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race calls allocate; counted by the plain test run")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	const b, n, h, d = 1, 1024, 8, 128
	r := rand.New(rand.NewPCG(29, 1))
	q := Dense(randSlice(r, b*n*h*d), b, n, h, d)
	k := Dense(randSlice(r, b*n*h*d), b, n, h, d)
	v := Dense(randSlice(r, b*n*h*d), b, n, h, d)
	do := Dense(randSlice(r, b*n*h*d), b, n, h, d)
	opts := &Options{Workers: 2}
	out, lse, err := Forward(q, k, v, opts)
	if err != nil {
		t.Fatal(err)
	}
	dq, dk, dv := NewTensor(b, n, h, d), NewTensor(b, n, h, d), NewTensor(b, n, h, d)
	runtime.GC()
	runtime.GC()
	bytes, _ := allocated(t, func() error { return BackwardInto(dq, dk, dv, q, k, v, out, do, lse, opts) })
	size := uint64(b * n * h * d * 4) // |Q| = |K| in bytes
	t.Logf("cold BackwardInto allocates %.2f MiB (|Q| = |K| = %.2f MiB)", float64(bytes)/(1<<20), float64(size)/(1<<20))
	if bytes >= 3*size+size {
		t.Errorf("cold BackwardInto allocates %d bytes ≥ 3·|K| + |Q| = %d: Q and dO copied into packs", bytes, 4*size)
	}
}
