package tile

import (
	"fmt"
	"strings"
)

// Warps is the number of warps of every attention kernel's thread block, and
// Threads its size. Each warp owns 16 rows (query rows in the forward and dQ
// kernels, key rows in the dK/dV kernel) per m-tile.
const (
	Warps   = 4
	Threads = 32 * Warps
)

// HeadDims are the head dimensions the kernels are generated for.
var HeadDims = []int{64, 128, 256}

// Fwd is the forward kernel's configuration: one thread block per (query
// block of Br rows, head, batch element); its warps split the query rows
// (MT m-tiles of 16 rows each); K and V tiles of Bc rows go through shared
// memory in two stages (cp.async double buffering).
type Fwd struct {
	D  int // head dimension
	Bc int // keys per tile
	MT int // 16-row m-tiles per warp
}

// FwdConfig returns the forward configuration for head dimension d.
func FwdConfig(d int) Fwd {
	switch d {
	case 64:
		return Fwd{D: 64, Bc: 64, MT: 2}
	case 128:
		return Fwd{D: 128, Bc: 64, MT: 1}
	default:
		return Fwd{D: d, Bc: 32, MT: 1}
	}
}

// Br is the number of query rows per thread block.
func (c Fwd) Br() int { return Warps * 16 * c.MT }

// QInRegs reports whether the warps keep their Q fragments in registers for
// the whole block (otherwise they reload them from shared memory per tile).
func (c Fwd) QInRegs() bool { return c.D*c.MT <= 128 }

// Smem layout (bytes): Q [Br][D], then per stage s K[s] [Bc][D] and V[s] [Bc][D].

// QOff is the byte offset of the Q tile.
func (c Fwd) QOff() int { return 0 }

// KOff is the byte offset of stage s's K tile.
func (c Fwd) KOff(s int) int { return c.Br()*c.D*2 + s*2*c.Bc*c.D*2 }

// VOff is the byte offset of stage s's V tile.
func (c Fwd) VOff(s int) int { return c.KOff(s) + c.Bc*c.D*2 }

// SmemBytes is the dynamic shared memory a block uses.
func (c Fwd) SmemBytes() int { return c.KOff(2) }

// RowChunks is the number of 16-byte chunks in a tile row (D elements).
func (c Fwd) RowChunks() int { return c.D / 8 }

// Name is the kernel's name for input type dt.
func (c Fwd) Name(dt string) string { return fmt.Sprintf("fwd_%s_d%d", dt, c.D) }

// Check reports a configuration the kernels cannot run.
func (c Fwd) Check() error {
	switch {
	case c.D%64 != 0 || c.D <= 0:
		return fmt.Errorf("tile: head dim %d is not a positive multiple of 64", c.D)
	case c.Bc%16 != 0 || c.Bc <= 0:
		return fmt.Errorf("tile: Bc %d is not a positive multiple of 16", c.Bc)
	case c.MT < 1:
		return fmt.Errorf("tile: MT %d < 1", c.MT)
	case (c.Br()*c.RowChunks())%Threads != 0 || (c.Bc*c.RowChunks())%Threads != 0:
		return fmt.Errorf("tile: tiles of %d/%d rows × %d chunks do not split over %d threads", c.Br(), c.Bc, c.RowChunks(), Threads)
	case c.SmemBytes() > MaxSmem:
		return fmt.Errorf("tile: %d bytes of shared memory exceed %d", c.SmemBytes(), MaxSmem)
	}
	return nil
}

// MaxSmem is the most dynamic shared memory per block a kernel may use: the
// opt-in limit of sm_80 (A100), which sm_90 exceeds.
const MaxSmem = 163 * 1024

// Bwd is the backward dK/dV kernel's configuration: one thread block per (key
// block of Bc = 16·Warps keys, query head, batch element); each warp owns 16
// keys and accumulates their dK and dV rows in registers while the block
// walks the query blocks of Br rows that see it (Q and dO in two stages).
// With the atomic dQ variant it also adds dS·K to a float32 dQ accumulator.
type Bwd struct {
	D  int
	Br int
}

// BwdConfig returns the dK/dV configuration for head dimension d.
func BwdConfig(d int) Bwd { return Bwd{D: d, Br: 64} }

// Bc is the number of keys per thread block.
func (c Bwd) Bc() int { return Warps * 16 }

// Smem layout (bytes): K [Bc][D], V [Bc][D], dS [Bc][Br] (stored
// transposed: a row per key), then two stages, each Q [Br][D], dO [Br][D]
// and the float32 rows LSE [Br] and dsum [Br] in one contiguous region, so
// that one register offset selects the stage.

// KOff is the byte offset of the K tile.
func (c Bwd) KOff() int { return 0 }

// VOff is the byte offset of the V tile.
func (c Bwd) VOff() int { return c.Bc() * c.D * 2 }

// DSOff is the byte offset of the dSᵀ tile.
func (c Bwd) DSOff() int { return 2 * c.Bc() * c.D * 2 }

// StageBytes is the size of one stage (Q, dO, LSE, dsum).
func (c Bwd) StageBytes() int { return 2*c.Br*c.D*2 + 2*c.Br*4 }

// QOff is the byte offset of stage s's Q tile.
func (c Bwd) QOff(s int) int { return c.DSOff() + c.Bc()*c.Br*2 + s*c.StageBytes() }

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
	case c.SmemBytes() > MaxSmem:
		return fmt.Errorf("tile: %d bytes of shared memory exceed %d", c.SmemBytes(), MaxSmem)
	}
	return nil
}

// DQ is the deterministic dQ kernel's configuration: one thread block per
// (query block, head, batch element) like the forward pass; it recomputes P
// and dS tile by tile and accumulates dQ = dS·K in registers.
type DQ struct {
	D  int
	Bc int
}

// DQConfig returns the dQ configuration for head dimension d.
func DQConfig(d int) DQ { return DQ{D: d, Bc: 64} }

// Br is the number of query rows per thread block.
func (c DQ) Br() int { return Warps * 16 }

// Smem layout (bytes): Q [Br][D], dO [Br][D], per stage K[s], V[s] [Bc][D].

// QOff is the byte offset of the Q tile.
func (c DQ) QOff() int { return 0 }

// DOOff is the byte offset of the dO tile.
func (c DQ) DOOff() int { return c.Br() * c.D * 2 }

// KOff is the byte offset of stage s's K tile.
func (c DQ) KOff(s int) int { return 2*c.Br()*c.D*2 + s*2*c.Bc*c.D*2 }

// VOff is the byte offset of stage s's V tile.
func (c DQ) VOff(s int) int { return c.KOff(s) + c.Bc*c.D*2 }

// SmemBytes is the dynamic shared memory a block uses.
func (c DQ) SmemBytes() int { return c.KOff(2) }

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
	case c.SmemBytes() > MaxSmem:
		return fmt.Errorf("tile: %d bytes of shared memory exceed %d", c.SmemBytes(), MaxSmem)
	}
	return nil
}

// SmemBytes returns the dynamic shared memory of the attention kernel
// called name (from Fwd.Name, Bwd.Name or DQ.Name) for head dimension d; 0
// for the small kernels, which use none.
func SmemBytes(name string, d int) int {
	switch {
	case strings.HasPrefix(name, "fwd_"):
		return FwdConfig(d).SmemBytes()
	case strings.HasPrefix(name, "bwddq_"):
		return DQConfig(d).SmemBytes()
	case strings.HasPrefix(name, "bwd_"), strings.HasPrefix(name, "bwdkv_"):
		return BwdConfig(d).SmemBytes()
	}
	return 0
}

// Grid returns the launch grid of a kernel with one block per (block of
// `per` rows, head, batch element) for sequences of at most maxSeq rows.
func Grid(maxSeq, per, heads, batch int) (x, y, z int) {
	return (maxSeq + per - 1) / per, heads, batch
}

// Small kernels (the dQ/dK/dV conversion and the backward preprocessing) use
// blocks of ElemThreads threads.
const ElemThreads = 256
