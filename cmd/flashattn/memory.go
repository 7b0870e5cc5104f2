package main

import (
	"fmt"
	"math"
	"runtime"
	"strings"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
)

// need is an estimate of the memory a run takes at its peak, by part, so
// that a run that cannot fit is refused before anything is allocated. The
// arithmetic saturates: dimensions whose products overflow need Inf.
type need struct {
	names []string
	sizes []memlimit.Size
}

// add counts s bytes under name (parts of the same name are summed).
func (n *need) add(name string, s memlimit.Size) {
	for i, x := range n.names {
		if x == name {
			n.sizes[i] = memlimit.Add(n.sizes[i], s)
			return
		}
	}
	n.names = append(n.names, name)
	n.sizes = append(n.sizes, s)
}

// floats counts a float32 (or int32) array of the given dimensions.
func (n *need) floats(name string, dims ...int) {
	n.add(name, memlimit.Mul(append(dims, 4)...))
}

func (n *need) total() memlimit.Size {
	t := runtimeSlack
	for _, s := range n.sizes {
		t = memlimit.Add(t, s)
	}
	return t
}

// runtimeSlack covers the Go runtime, stacks and small allocations.
const runtimeSlack memlimit.Size = 32 << 20

// check refuses the run with one line if it does not fit in the limit:
// "WHAT: needs 8.0 TiB of memory (inputs 4.0 TiB, outputs 4.0 TiB, work
// 1.0 MiB), but only 20.1 GiB is available (MemAvailable in /proc/meminfo);
// HINT".
func (n *need) check(l memlimit.Limit, what, hint string) error {
	t := n.total()
	// Sizes that overflow are refused even when the limit is unknown.
	if t != memlimit.Inf && (!l.Known() || t <= l.Bytes) {
		return nil
	}
	var parts []string
	for i, name := range n.names {
		if n.sizes[i] > 0 {
			parts = append(parts, fmt.Sprintf("%s %v", name, n.sizes[i]))
		}
	}
	avail := ""
	if l.Known() {
		avail = fmt.Sprintf(", but only %v is available (%s)", l.Bytes, l.Source)
	}
	if hint != "" {
		hint = "; " + hint
	}
	return fmt.Errorf("%s: needs %v of memory (%s)%s%s", what, t, strings.Join(parts, ", "), avail, hint)
}

// pad16 rounds n up to a multiple of 16 (the kernels' padding), saturating.
func pad16(n int) int {
	if n > math.MaxInt-15 {
		return math.MaxInt
	}
	return (n + 15) / 16 * 16
}

// effectiveWorkers is the number of goroutines that work at once: the
// library runs at most GOMAXPROCS pool workers plus the caller.
func effectiveWorkers(workers int) int {
	p := runtime.GOMAXPROCS(0)
	if workers <= 0 {
		return p
	}
	return min(workers, p+1)
}

// workerTiles bounds one worker's tile buffers (a few B_r × B_c tiles and
// packed panels; independent of the sequence length).
const workerTiles = 4 << 20

// addFlashWork adds what flashattn allocates beyond its inputs and outputs
// for a problem of nb sequences of sq queries and sk keys (capacity keys
// per sequence for a KV cache), head dim d for Q and K and dv for V: K and
// V packed once per call, the workers' tiles, and for the backward the
// per-worker O(N) rows (Q and dQ of d, O and dO of dv) and the dQ partial
// sums (the backward splits each sequence and KV head into about
// 8/(sequences × KV heads) chunks, each with a dQ partial).
func (n *need) addFlashWork(nb, sq, sk, h, hk, d, dv, workers int, backward bool) {
	dp, dvp := pad16(d), pad16(dv)
	w := effectiveWorkers(workers)
	n.add("work", memlimit.Add(memlimit.Mul(nb, hk, pad16(sk), d, 4), memlimit.Mul(nb, hk, sk, dvp, 4)))
	n.add("work", memlimit.Mul(w, workerTiles))
	if backward {
		n.add("work", memlimit.Mul(w, 2, sq, dp, 4))
		n.add("work", memlimit.Mul(w, 2, sq, dvp, 4))
		if chunks := 8 / max(1, min(nb, 8)*min(hk, 8)); chunks > 1 {
			n.add("work", memlimit.Mul(chunks+1, nb, sq, h, dp, 4))
		}
	}
}

// addPlainWork adds what the plain algorithm allocates for one call: the
// Sq×Sk score matrix (two of them, P and dP, for the backward), one head's
// rows, and its own outputs.
func (n *need) addPlainWork(b, sq, sk, h, hk, d int, backward bool) {
	mats := 1
	if backward {
		mats = 2
	}
	n.add("plain", memlimit.Mul(mats, sq, pad16(sk), 4))
	n.add("plain", memlimit.Mul(10, max(sq, sk), pad16(d), 4))
	n.add("plain", memlimit.Mul(b, sq, h, d, 4))
	n.add("plain", memlimit.Mul(b, h, sq, 4))
	if backward {
		n.add("plain", memlimit.Mul(b, sq, h, d, 4))
		n.add("plain", memlimit.Mul(2, b, sk, hk, d, 4))
	}
}
