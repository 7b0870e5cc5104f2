package flashattn

import (
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/flashattn/flashattn/internal/kernel"
)

// tilesize.go picks the tile sizes from the CPU caches (the paper's SRAM).

// Cache sizes, read once: from Linux sysfs, else as the CPU reports them
// (CPUID on amd64), else typical of current x86 cores (32 KiB L1d,
// 1 MiB L2).
var cacheSizes = sync.OnceValues(func() (l1, l2 int) {
	l1, l2 = 0, 0
	for idx := 0; idx < 8; idx++ {
		dir := "/sys/devices/system/cpu/cpu0/cache/index" + strconv.Itoa(idx) + "/"
		lvl, err1 := os.ReadFile(dir + "level")
		typ, err2 := os.ReadFile(dir + "type")
		sz, err3 := os.ReadFile(dir + "size")
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		n := parseSize(strings.TrimSpace(string(sz)))
		if n <= 0 {
			continue
		}
		switch strings.TrimSpace(string(lvl)) {
		case "1":
			if strings.TrimSpace(string(typ)) != "Instruction" {
				l1 = n
			}
		case "2":
			l2 = n
		}
	}
	if c1, c2, _, ok := kernel.CacheSizes(); ok {
		if l1 == 0 {
			l1 = c1
		}
		if l2 == 0 {
			l2 = c2
		}
	}
	if l1 <= 0 {
		l1 = 32 << 10
	}
	if l2 <= 0 {
		l2 = 1 << 20
	}
	return l1, l2
})

func parseSize(s string) int {
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n * mult
}

// blockSizesFor picks the tile sizes for head dimension d by the paper's
// rule B_c = M/(4d), B_r = min(B_c, d), with the on-chip memory M taken as
// an L2 of l2 bytes (in floats; calls pass this core's): K and V tiles
// stream through L2 while the microkernel's panels and rows stream through
// L1. Measured on a 1 MiB-L2
// core, larger key tiles win up to 512 keys (fewer output rescales and
// calls per score), also under a causal mask, so B_c is capped there. B_r
// is 48 rows (a multiple of the 6-row microkernel): as fast as 60 for full
// attention at d = 64 and 10% faster for a sliding window, whose tiles are
// B_r + window keys wide for about window useful keys per row; without any
// mask and with d ≥ 96 it is 96 rows.
// Sizes are rounded to multiples of the kernel width and clamped to ranges
// that keep the per-tile overheads small. A BlockK override is rounded up to
// a multiple of 16.
func blockSizesFor(d, l2 int, o *Options) (bq, bk int) {
	m := l2 / 4
	bk = m / (4 * max(d, 16))
	bk = min(max(bk/16*16, 32), 512)
	bq = min(max(bk, 32), max(d, 48))
	bq = min(max(bq/12*12, 24), 48)
	if !o.Causal && o.Window == nil && o.BlockMask == nil && o.Mask == nil && d >= 96 && bk >= 256 {
		// Unmasked, wide heads, a cache that holds the larger tiles: more
		// rows per pass over K and V (measured at d = 128 on Zen 4: 96
		// rows 7–9% faster than 48).
		bq = 96
	}
	if o.BlockQ > 0 {
		bq = o.BlockQ
	}
	if o.BlockK > 0 {
		bk = (o.BlockK + 15) / 16 * 16 // key tiles start on kernel-width boundaries
	}
	return bq, bk
}

// superBlockRows is the forward's super-block for head dims d (Q, K) and
// dv (V, O) and an L2 of l2 bytes: the query rows whose Q rows and output
// accumulators stay in L2 while the K/V tiles stream past, so that each K/V
// tile is read from memory once per super-block instead of once per
// microtile of bq rows — the forward then moves Θ(N²d²/M) bytes, as the
// paper's analysis has it. Q and O of the super-block take about a quarter
// of M (the K and V tiles of B_c = M/(4d) keys take about half):
// B_r = M/(4·(d+dv)) floats, a multiple of bq, at most 512 rows. A BlockQ
// override keeps one microtile per block (no super-blocks), and so do
// block masks and element masks: their microtiles see different key
// blocks, so a super-block would read the union of their tiles. With few
// workers the forward joins neighbouring super-blocks into wider tasks
// (widen.go), which measured faster although their Q and O exceed M.
func superBlockRows(d, dv, l2, bq int, o *Options) int {
	if o.BlockQ > 0 || o.BlockMask != nil || o.Mask != nil {
		return bq
	}
	rows := l2 / 4 / (4 * (d + dv))
	rows = min(rows/bq*bq, 512/bq*bq)
	return max(rows, bq)
}

// backwardKeyBlock is the KV block of the backward pass. Without a mask it is
// the forward's B_c. Under a causal or window mask every KV block meets the
// diagonal in many query blocks, whose tiles are partly wasted, so smaller
// blocks win: measured on N = 1024…4096 causal, N/8 clamped to 128…256 was
// 5–20% faster than 512.
func backwardKeyBlock(bk, sk int, o *Options) int {
	if o.BlockK > 0 || (!o.Causal && o.Window == nil) {
		return bk
	}
	return min(bk, max(128, min(256, (sk/8+15)/16*16)))
}

// alignToMask adapts the tiles to a block mask's blocks, so that tiles do not
// straddle mask blocks (a straddling tile is computed when either block is
// visible): the query tile becomes the largest divisor of the mask's BlockQ
// in [16, 64], and the backward's KV block the largest multiple of
// kernel.W dividing BlockK, at most the unmasked choice. Where no such size
// exists the tiles are kept. (The forward's key tiles need no change: they
// are cut at mask-block boundaries as they are walked.)
func alignToMask(bq, bkB int, s BlockShape) (int, int) {
	for d := min(64, s.BlockQ); d >= 16; d-- {
		if s.BlockQ%d == 0 {
			bq = d
			break
		}
	}
	for n := min(bkB, s.BlockK) / kernel.W * kernel.W; n >= kernel.W; n -= kernel.W {
		if s.BlockK%n == 0 {
			bkB = n
			break
		}
	}
	return bq, bkB
}
