package tile

import (
	"fmt"
	"strings"
)

// WarpThreads is the number of threads of a warp. Every attention kernel's
// warps own 16-row m-tiles (query rows in the forward and dQ kernels, key
// rows in the dK/dV kernel); how many warps a block has depends on the kernel
// (the configurations' Warps fields).
const WarpThreads = 32

// HeadDims are the head dimensions the kernels are generated for.
var HeadDims = []int{64, 128, 256}

// Fwd is the forward kernel's configuration: one thread block of Warps warps
// per (query block of Br = 16·MT·Warps rows, head, batch element); warp w
// owns query rows [16·MT·w, 16·MT·(w+1)). K and V tiles of Bc rows each have
// one shared-memory buffer and are loaded staggered, as flash-attn does: V
// of block n is copied while S = Q·Kᵀ and the softmax of block n run, and K
// of block n+1 while O += P·V of block n runs. With KVDouble they have two
// buffers each: K and V of block n+1 are copied while the whole of block n
// runs, one barrier per block instead of two.
//
// With Split set it is the split-KV (flash-decoding) variant, FwdSplitConfig:
// the same main loop over a part of the block's key tiles, writing float32
// partial results that a combine kernel merges.
type Fwd struct {
	D        int  // head dimension
	Bc       int  // keys per tile
	MT       int  // 16-row m-tiles per warp
	Warps    int  // warps per block
	Split    bool // the split-KV variant (see FwdSplitConfig)
	KVDouble bool // K and V double-buffered
}

// FwdConfig returns the forward configuration for head dimension d:
// 128-row query blocks and 64-key tiles everywhere, as flash-attn 2 has on
// sm_80/sm_90: d64 and d128: 4 warps of 32 rows (at d128 the O (128) and
// S (64) accumulators take 192 of the 255 registers; ptxas 11.8 fits the
// rest without spilling); d256: 8 warps of 16 rows, 128 KiB of shared
// memory. Registers allow two blocks per SM at d64 and d128; K and V are
// double-buffered where two blocks' shared memory still fits an A100's 164
// KiB (d64: 48 KiB; d128 would need 96).
func FwdConfig(d int) Fwd {
	switch d {
	case 64:
		return Fwd{D: d, Bc: 64, MT: 2, Warps: 4, KVDouble: true}
	case 128:
		return Fwd{D: d, Bc: 64, MT: 2, Warps: 4}
	default:
		return Fwd{D: d, Bc: 64, MT: 1, Warps: 8}
	}
}

// Threads is the block size.
func (c Fwd) Threads() int { return WarpThreads * c.Warps }

// Br is the number of query rows per thread block.
func (c Fwd) Br() int { return c.Warps * 16 * c.MT }

// QInRegs reports whether the warps keep their Q fragments in registers for
// the whole block (otherwise they reload them from shared memory per tile).
func (c Fwd) QInRegs() bool { return c.D*c.MT <= 128 }

// Smem layout (bytes): Q [Br][D], K [Bc][D], V [Bc][D], and with KVDouble
// the second K and V. The epilogue stages each warp's O rows in its own
// rows of the Q tile.

// QOff is the byte offset of the Q tile.
func (c Fwd) QOff() int { return 0 }

// KOff is the byte offset of the K tile.
func (c Fwd) KOff() int { return c.Br() * c.D * 2 }

// VOff is the byte offset of the V tile.
func (c Fwd) VOff() int { return c.KOff() + c.Bc*c.D*2 }

// KVStageBytes is the offset of the second K and V buffers from the first
// (KVDouble).
func (c Fwd) KVStageBytes() int { return 2 * c.Bc * c.D * 2 }

// SmemBytes is the dynamic shared memory a block uses.
func (c Fwd) SmemBytes() int {
	n := c.VOff() + c.Bc*c.D*2
	if c.KVDouble {
		n += c.KVStageBytes()
	}
	return n
}

// RowChunks is the number of 16-byte chunks in a tile row (D elements).
func (c Fwd) RowChunks() int { return c.D / 8 }

// Name is the kernel's name for input type dt: fwd_<dt>_d<D>, or
// fwdsplit_<dt>_d<D> for the split-KV variant.
func (c Fwd) Name(dt string) string {
	if c.Split {
		return fmt.Sprintf("fwdsplit_%s_d%d", dt, c.D)
	}
	return fmt.Sprintf("fwd_%s_d%d", dt, c.D)
}

// Check reports a configuration the kernels cannot run.
func (c Fwd) Check() error {
	switch {
	case c.D%64 != 0 || c.D <= 0:
		return fmt.Errorf("tile: head dim %d is not a positive multiple of 64", c.D)
	case c.Bc%16 != 0 || c.Bc <= 0:
		return fmt.Errorf("tile: Bc %d is not a positive multiple of 16", c.Bc)
	case c.MT < 1 || c.Warps < 1 || c.Warps > 8:
		return fmt.Errorf("tile: MT %d, Warps %d", c.MT, c.Warps)
	}
	if err := checkCopy(c.Threads(), c.RowChunks(), c.Br(), c.Bc); err != nil {
		return err
	}
	return checkSmem(c.SmemBytes())
}

// checkCopy reports tiles of the given row counts that the block's threads
// cannot copy in whole passes whose rows are a multiple of 8 apart (the
// generator relies on a thread's chunks sharing one swizzle phase).
func checkCopy(threads, rc int, rows ...int) error {
	if threads%rc != 0 || (threads/rc)%8 != 0 {
		return fmt.Errorf("tile: %d threads copy %d-chunk rows in passes of %d rows, not a multiple of 8", threads, rc, threads/max(rc, 1))
	}
	for _, r := range rows {
		if (r*rc)%threads != 0 {
			return fmt.Errorf("tile: a tile of %d rows × %d chunks does not split over %d threads", r, rc, threads)
		}
	}
	return nil
}

func checkSmem(n int) error {
	if n > MaxSmem {
		return fmt.Errorf("tile: %d bytes of shared memory exceed %d", n, MaxSmem)
	}
	return nil
}

// MaxSmem is the most dynamic shared memory per block a kernel may use: the
// opt-in limit of sm_80 (A100), which sm_90 exceeds.
const MaxSmem = 163 * 1024

// Bwd is the backward dK/dV kernel's configuration: one thread block of
// Warps warps per (key block of Bc = 16·Warps keys, query head, batch
// element) that walks the query blocks of Br rows that see it (Q, dO, LSE
// and dsum double-buffered), with flash-attn 2's warp layouts (its sm_80
// d128 backward: 64 queries × 128 keys, 8 warps). The warps form a grid of
// KeyGroups × 2 for each product, per query block:
//
//	Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ: warp (kg, qh) the 32 keys of key group kg ×
//	    the Br/2 queries of half qh; P and dS (as Pᵀ, dSᵀ) go to shared
//	    memory;
//	dV += Pᵀ·dO, dK += dSᵀ·Q: warp (kg, dh) the 32 keys × the D/2 columns
//	    of half dh, its dK and dV accumulators kept in registers for the
//	    whole block;
//
// and with the atomic dQ variant, dQ = dS·K: warp w the 32 query rows
// 32·(w % DQRowGroups) × the DQCols columns from (w / DQRowGroups)·DQCols,
// added to a float32 accumulator. Each warp loads its operands' shares
// only: 144 ldmatrix per 320 mma at d128 (the former layout, a warp per 16
// keys with all queries, needed 200). 128-key blocks halve the dQ atomics
// per FLOP of 64-key blocks.
type Bwd struct {
	D     int
	Br    int
	Warps int
}

// BwdConfig returns the dK/dV configuration for head dimension d.
func BwdConfig(d int) Bwd { return Bwd{D: d, Br: 64, Warps: 8} }

// Threads is the block size.
func (c Bwd) Threads() int { return WarpThreads * c.Warps }

// Bc is the number of keys per thread block.
func (c Bwd) Bc() int { return c.Warps * 16 }

// KeyGroups is the number of 32-key groups of the block; warp w is in key
// group w % KeyGroups and query (or column) half w / KeyGroups.
func (c Bwd) KeyGroups() int { return c.Bc() / 32 }

// DQRowGroups and DQColGroups split the atomic variant's dQ product (Br
// query rows × D) over the warps: warp w computes rows 32·(w % DQRowGroups)
// (two m-tiles) and columns [(w / DQRowGroups)·DQCols, +DQCols).
func (c Bwd) DQRowGroups() int { return c.Br / 32 }

// DQColGroups is the number of column groups of the dQ product.
func (c Bwd) DQColGroups() int { return c.Warps / c.DQRowGroups() }

// DQCols is the number of dQ columns a warp computes.
func (c Bwd) DQCols() int { return c.D / c.DQColGroups() }

// Smem layout (bytes): K [Bc][D], V [Bc][D], dSᵀ [Bc][Br] and Pᵀ [Bc][Br]
// (a row per key), then two stages, each Q [Br][D], dO [Br][D] and the
// float32 rows LSE [Br] and dsum [Br] in one contiguous region, so that one
// register offset selects the stage.

// KOff is the byte offset of the K tile.
func (c Bwd) KOff() int { return 0 }

// VOff is the byte offset of the V tile.
func (c Bwd) VOff() int { return c.Bc() * c.D * 2 }

// DSOff is the byte offset of the dSᵀ tile.
func (c Bwd) DSOff() int { return 2 * c.Bc() * c.D * 2 }

// StageBytes is the size of one stage (Q, dO, LSE, dsum).
func (c Bwd) StageBytes() int { return 2*c.Br*c.D*2 + 2*c.Br*4 }

// PTOff is the byte offset of the Pᵀ tile.
func (c Bwd) PTOff() int { return c.DSOff() + c.Bc()*c.Br*2 }

// QOff is the byte offset of stage s's Q tile.
func (c Bwd) QOff(s int) int { return c.PTOff() + c.Bc()*c.Br*2 + s*c.StageBytes() }

// DOOff is the byte offset of stage s's dO tile.
func (c Bwd) DOOff(s int) int { return c.QOff(s) + c.Br*c.D*2 }

// LSEOff is the byte offset of stage s's LSE row.
func (c Bwd) LSEOff(s int) int { return c.QOff(s) + 2*c.Br*c.D*2 }

// DsumOff is the byte offset of stage s's dsum row.
func (c Bwd) DsumOff(s int) int { return c.LSEOff(s) + c.Br*4 }

// SmemBytes is the dynamic shared memory a block uses.
func (c Bwd) SmemBytes() int { return c.QOff(2) }

// RowChunks is the number of 16-byte chunks in a tile row (D elements).
func (c Bwd) RowChunks() int { return c.D / 8 }

// PadRows is the number of rows the float32 dQ accumulator gives a sequence
// of sq query rows in a dense batch: sq rounded up to whole query blocks, so
// that every block adds its whole Br rows without a bounds predicate (the
// rows past sq receive exact zeros: their dS is 0). A packed varlen batch
// gives sequence b its rows from cu_seqlens_q[b] + b·Br on (a batch stride
// of Br rows), which leaves the same Br rows of room after each sequence.
func (c Bwd) PadRows(sq int) int { return (sq + c.Br - 1) / c.Br * c.Br }

// Name returns the kernel name; atomicDQ selects the variant that also
// accumulates dQ with float32 atomics.
func (c Bwd) Name(dt string, atomicDQ bool) string {
	if atomicDQ {
		return fmt.Sprintf("bwd_%s_d%d", dt, c.D)
	}
	return fmt.Sprintf("bwdkv_%s_d%d", dt, c.D)
}

// Check reports a configuration the kernels cannot run.
func (c Bwd) Check() error {
	switch {
	case c.D%64 != 0 || c.D <= 0 || c.D > 128:
		return fmt.Errorf("tile: backward head dim %d must be 64 or 128", c.D)
	case c.Br != 64:
		return fmt.Errorf("tile: backward Br %d must be 64 (the dS tile is %d keys × 64 queries)", c.Br, c.Bc())
	case c.Warps%2 != 0 || c.Br != 2*32 || c.D%32 != 0:
		return fmt.Errorf("tile: %d warps cannot form the 2-wide warp grids over %d queries and head dim %d", c.Warps, c.Br, c.D)
	case c.Warps%c.DQRowGroups() != 0 || c.DQCols()%16 != 0:
		return fmt.Errorf("tile: %d warps do not split dQ (%d×%d) into 32-row, 16-column multiples", c.Warps, c.Br, c.D)
	}
	if err := checkCopy(c.Threads(), c.RowChunks(), c.Br, c.Bc()); err != nil {
		return err
	}
	if 2*c.Br > c.Threads() {
		return fmt.Errorf("tile: %d threads cannot copy the %d LSE and dsum values of a stage", c.Threads(), 2*c.Br)
	}
	return checkSmem(c.SmemBytes())
}

// DQ is the deterministic dQ kernel's configuration: one thread block of
// Warps warps per (query block of 16·Warps rows, head, batch element) like
// the forward pass; it recomputes P and dS tile by tile and accumulates
// dQ = dS·K in registers. K is double-buffered (block n+1's K is copied
// while block n's runs) and V single-buffered (block n+1's V is copied once
// dP of block n is done).
type DQ struct {
	D     int
	Bc    int
	Warps int
}

// DQConfig returns the dQ configuration for head dimension d.
func DQConfig(d int) DQ { return DQ{D: d, Bc: 64, Warps: 4} }

// Threads is the block size.
func (c DQ) Threads() int { return WarpThreads * c.Warps }

// Br is the number of query rows per thread block.
func (c DQ) Br() int { return c.Warps * 16 }

// QInRegs reports whether the warps keep their Q and dO fragments in
// registers (d64: 32 registers); at d128 they are reloaded from shared
// memory per key block to stay within 255 registers without spills.
func (c DQ) QInRegs() bool { return c.D <= 64 }

// Smem layout (bytes): Q [Br][D], dO [Br][D], K[0], K[1] [Bc][D], V [Bc][D].
// The epilogue stages each warp's dQ rows in its own rows of the Q tile.

// QOff is the byte offset of the Q tile.
func (c DQ) QOff() int { return 0 }

// DOOff is the byte offset of the dO tile.
func (c DQ) DOOff() int { return c.Br() * c.D * 2 }

// KOff is the byte offset of K buffer s (0 or 1).
func (c DQ) KOff(s int) int { return 2*c.Br()*c.D*2 + s*c.Bc*c.D*2 }

// VOff is the byte offset of the V tile.
func (c DQ) VOff() int { return c.KOff(2) }

// SmemBytes is the dynamic shared memory a block uses.
func (c DQ) SmemBytes() int { return c.VOff() + c.Bc*c.D*2 }

// RowChunks is the number of 16-byte chunks in a tile row (D elements).
func (c DQ) RowChunks() int { return c.D / 8 }

// Name is the kernel's name for input type dt.
func (c DQ) Name(dt string) string { return fmt.Sprintf("bwddq_%s_d%d", dt, c.D) }

// Check reports a configuration the kernels cannot run.
func (c DQ) Check() error {
	switch {
	case c.D%64 != 0 || c.D <= 0 || c.D > 128:
		return fmt.Errorf("tile: dQ head dim %d must be 64 or 128", c.D)
	case c.Bc%16 != 0 || c.Bc <= 0:
		return fmt.Errorf("tile: Bc %d is not a positive multiple of 16", c.Bc)
	}
	if err := checkCopy(c.Threads(), c.RowChunks(), c.Br(), c.Bc); err != nil {
		return err
	}
	return checkSmem(c.SmemBytes())
}

// kernelConfig is what SmemBytes and Threads read of an attention
// kernel's configuration (Fwd, Bwd or DQ).
type kernelConfig interface {
	SmemBytes() int
	Threads() int
}

// configOf returns the configuration of the attention kernel called name
// (from Fwd.Name, Bwd.Name or DQ.Name) for head dimension d, or false for
// the small kernels.
func configOf(name string, d int) (kernelConfig, bool) {
	switch {
	case strings.HasPrefix(name, "fwd_"):
		return FwdConfig(d), true
	case strings.HasPrefix(name, "fwdsplit_"):
		return FwdSplitConfig(d), true
	case strings.HasPrefix(name, "bwddq_"):
		return DQConfig(d), true
	case strings.HasPrefix(name, "bwd_"), strings.HasPrefix(name, "bwdkv_"):
		return BwdConfig(d), true
	}
	return nil, false
}

// SmemBytes returns the dynamic shared memory of the attention kernel
// called name (from Fwd.Name, Bwd.Name or DQ.Name) for head dimension d; 0
// for the small kernels, which use none.
func SmemBytes(name string, d int) int {
	if c, ok := configOf(name, d); ok {
		return c.SmemBytes()
	}
	return 0
}

// Threads returns the block size of the kernel called name for head
// dimension d (ElemThreads for the small kernels).
func Threads(name string, d int) int {
	if c, ok := configOf(name, d); ok {
		return c.Threads()
	}
	return ElemThreads
}

// Grid returns the launch grid of a kernel with one block per (block of
// `per` rows, head, batch element) for sequences of at most maxSeq rows.
// The forward and dQ kernels take their query block as
// gridDim.x - 1 - blockIdx.x: blocks are dispatched in x order, and with a
// causal mask the last query blocks see the most keys, so the heaviest
// blocks of each head start first and the light ones fill the tail.
func Grid(maxSeq, per, heads, batch int) (x, y, z int) {
	return (maxSeq + per - 1) / per, heads, batch
}

// Small kernels (the dQ/dK/dV conversion and the backward preprocessing) use
// blocks of ElemThreads threads.
const ElemThreads = 256
