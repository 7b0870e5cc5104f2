package main

import (
	"io/fs"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
	"github.com/flashattn/flashattn/internal/kernel"
)

// llc describes the last-level cache from sysfs.
type llc struct {
	Size      memlimit.Size // one instance
	Instances int           // distinct instances (e.g. one L3 per CCX)
}

// Total is the last-level cache of the whole machine: what a parallel
// stream over all cores could keep cached.
func (c llc) Total() memlimit.Size { return c.Size.Times(c.Instances) }

// readLLC finds the highest-level data or unified cache in a tree laid out
// like /sys (devices/system/cpu/cpuN/cache/indexM/{level,type,size,
// shared_cpu_list}) and counts its distinct instances. It returns the zero
// llc if nothing can be read.
func readLLC(sys fs.FS) llc {
	dirs, _ := fs.Glob(sys, "devices/system/cpu/cpu[0-9]*/cache/index[0-9]*")
	best := llc{}
	level := 0
	shared := map[string]bool{}
	read := func(dir, name string) string {
		b, err := fs.ReadFile(sys, path.Join(dir, name))
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	for _, d := range dirs {
		if t := read(d, "type"); t != "Data" && t != "Unified" {
			continue
		}
		l, err := strconv.Atoi(read(d, "level"))
		size := parseCacheSize(read(d, "size"))
		if err != nil || size == 0 || l < level {
			continue
		}
		if l > level {
			level, best, shared = l, llc{Size: size}, map[string]bool{}
		}
		best.Size = max(best.Size, size)
		cpus := read(d, "shared_cpu_list")
		if cpus == "" {
			cpus = d // unknown sharing: count every CPU's cache
		}
		if !shared[cpus] {
			shared[cpus] = true
			best.Instances++
		}
	}
	return best
}

// parseCacheSize parses sysfs cache sizes: "32768K", "1M", "512".
func parseCacheSize(s string) memlimit.Size {
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0
	}
	return memlimit.Mul(n, mult)
}

// minBandwidthBuffer is the smallest default bandwidth buffer.
const minBandwidthBuffer = 256 << 20

// bandwidthBuffer returns the size of each of the two bandwidth buffers:
// 4× the whole machine's last-level cache and at least 256 MiB, shrunk if
// needed so that both buffers fit in room (but never below 4× the LLC; 0
// means they do not fit at all).
func bandwidthBuffer(c llc, room memlimit.Size) memlimit.Size {
	want := max(c.Total().Times(4), minBandwidthBuffer)
	if want.Times(2) <= room {
		return want
	}
	floor := max(c.Total().Times(4), 64<<20)
	if got := room / 2; got >= floor {
		return got
	}
	return 0
}

// bandwidth measures memory bandwidth on two large buffers with every
// worker streaming its own part.
type bandwidth struct {
	src, dst []float32
	workers  int
	max      func([]float32) float32 // the fastest vector reduction this CPU has
	sink     []float32
}

// newBandwidth allocates and touches two buffers of size bytes each.
func newBandwidth(size memlimit.Size, workers int) *bandwidth {
	chunk := int(size) / 4 / workers / kernel.W * kernel.W
	n := max(chunk, kernel.W) * workers
	b := &bandwidth{src: make([]float32, n), dst: make([]float32, n), workers: workers,
		max: kernel.Available()[0].Max, sink: make([]float32, workers)}
	for i := range b.src {
		b.src[i] = float32(i & 1023)
	}
	copy(b.dst, b.src)
	return b
}

// Bytes is the size of one buffer.
func (b *bandwidth) Bytes() int { return 4 * len(b.src) }

// each runs f on every worker's part of the buffers in parallel, passes
// times, and returns the elapsed seconds.
func (b *bandwidth) each(passes int, f func(w int, src, dst []float32)) float64 {
	chunk := len(b.src) / b.workers
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < b.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range passes {
				f(w, b.src[w*chunk:(w+1)*chunk], b.dst[w*chunk:(w+1)*chunk])
			}
		}()
	}
	wg.Wait()
	return time.Since(t0).Seconds()
}

// read returns the read-only bandwidth in GB/s: every worker reduces its
// part with the vector max kernel (which only loads).
func (b *bandwidth) read() float64 {
	const passes = 2
	s := b.each(passes, func(w int, src, _ []float32) { b.sink[w] = b.max(src) })
	return float64(passes) * float64(b.Bytes()) / s / 1e9
}

// copy returns the copy bandwidth in GB/s, counting the bytes read and the
// bytes written (the STREAM convention).
func (b *bandwidth) copy() float64 {
	const passes = 2
	s := b.each(passes, func(_ int, src, dst []float32) { copy(dst, src) })
	return float64(passes) * 2 * float64(b.Bytes()) / s / 1e9
}
