package flashattn

import (
	"sync"
	"sync/atomic"
)

// BlockShape is the geometry of a BlockMask.
type BlockShape struct {
	// Batch and Heads are 1 (one mask shared by every batch element or
	// query head) or the call's batch size (number of sequences with
	// VarLen) and number of query heads.
	Batch, Heads int
	// SeqQ and SeqK are the query and key lengths the mask covers: at
	// least every sequence's length.
	SeqQ, SeqK int
	// BlockQ and BlockK are the mask's block size in rows and keys; 0 means
	// 128. They are independent of the kernels' tiles (which follow them
	// where they can); the last block of each axis may be short.
	BlockQ, BlockK int
}

func (s BlockShape) blocks() (nqb, nkb int) {
	return ceilDiv(s.SeqQ, s.BlockQ), ceilDiv(s.SeqK, s.BlockK)
}

// ceilDiv is ⌈n/b⌉ for n ≥ 1, b ≥ 1, without overflow.
func ceilDiv(n, b int) int { return (n-1)/b + 1 }

// DefaultMaskBlock is the block size of a BlockShape whose BlockQ or BlockK
// is 0.
const DefaultMaskBlock = 128

// maxMaskBlocks bounds the size of a block table (entries), about 1 GiB.
const maxMaskBlocks = 1 << 30

func (s *BlockShape) resolve() error {
	if s.BlockQ == 0 {
		s.BlockQ = DefaultMaskBlock
	}
	if s.BlockK == 0 {
		s.BlockK = DefaultMaskBlock
	}
	switch {
	case s.Batch < 1 || s.Heads < 1 || s.SeqQ < 1 || s.SeqK < 1:
		return argErr("shape", "BlockShape %+v: Batch, Heads, SeqQ and SeqK must be ≥ 1", *s)
	case s.BlockQ < 1 || s.BlockK < 1:
		return argErr("shape", "BlockShape %+v: BlockQ and BlockK must be ≥ 1 (0: %d)", *s, DefaultMaskBlock)
	}
	nqb, nkb := s.blocks()
	n, ok := mulAdd(s.Batch, s.Heads, 0)
	if ok {
		n, ok = mulAdd(n, nqb, 0)
	}
	if ok {
		n, ok = mulAdd(n, nkb, 0)
	}
	if !ok || n > maxMaskBlocks {
		return argErr("shape", "BlockShape %+v has more than %d blocks", *s, maxMaskBlocks)
	}
	return nil
}

// BlockMask is a block-sparse attention mask (the block-sparse
// FlashAttention of the FlashAttention paper, with FlexAttention's
// BlockMask semantics). The query × key plane of each (batch, head) is cut
// into blocks of BlockQ × BlockK; each block is empty (skipped: neither
// read nor computed, forward or backward), full (computed with no
// per-element mask) or partial (computed, then the element mask it was
// built from is applied). Time and memory traffic are proportional to the
// number of blocks that are not empty.
//
// A BlockMask is built once, from an element mask (NewBlockMask), a block
// pattern (BlockMaskFromFunc) or a table (BlockMaskFromTable), and may be
// shared by any number of calls, forward and backward, concurrently. It
// stores one byte per block and never an element-level matrix: a
// 131072 × 131072 mask of 128-blocks takes 1 MiB per distinct head. The
// backward pass walks its columns (the transposed lists) from the same
// table.
type BlockMask struct {
	shape    BlockShape
	nqb, nkb int
	kinds    []BlockKind // [Batch][Heads][nqb][nkb]
	// rowSpan[2r], rowSpan[2r+1]: the key blocks [lo, hi) that hold every
	// non-empty block of row r = (b*Heads + h)*nqb + qb; colSpan likewise
	// the query blocks of each column.
	rowSpan, colSpan []int32
	mask             Mask // applied to partial blocks; nil if there are none
}

// Shape returns the mask's geometry (with block sizes resolved).
func (m *BlockMask) Shape() BlockShape { return m.shape }

// Blocks returns the number of query blocks and key blocks.
func (m *BlockMask) Blocks() (q, k int) { return m.nqb, m.nkb }

// Kind returns the kind of block (qb, kb) of batch element b and head h.
func (m *BlockMask) Kind(b, h, qb, kb int) BlockKind {
	return m.kinds[m.row(b, h, qb)*m.nkb+kb]
}

// Density returns the fraction of blocks that are not empty.
func (m *BlockMask) Density() float64 {
	n := 0
	for _, k := range m.kinds {
		if k != BlockEmpty {
			n++
		}
	}
	return float64(n) / float64(len(m.kinds))
}

func (m *BlockMask) row(b, h, qb int) int {
	return (min(b, m.shape.Batch-1)*m.shape.Heads+min(h, m.shape.Heads-1))*m.nqb + qb
}

func newBlockMask(shape BlockShape) (*BlockMask, error) {
	if err := shape.resolve(); err != nil {
		return nil, err
	}
	m := &BlockMask{shape: shape}
	m.nqb, m.nkb = shape.blocks()
	m.kinds = make([]BlockKind, shape.Batch*shape.Heads*m.nqb*m.nkb)
	return m, nil
}

// spans computes rowSpan and colSpan from kinds.
func (m *BlockMask) spans() {
	bh := m.shape.Batch * m.shape.Heads
	m.rowSpan = make([]int32, 2*bh*m.nqb)
	m.colSpan = make([]int32, 2*bh*m.nkb)
	for g := 0; g < bh; g++ {
		cols := m.colSpan[2*g*m.nkb : 2*(g+1)*m.nkb]
		for kb := 0; kb < m.nkb; kb++ {
			cols[2*kb], cols[2*kb+1] = int32(m.nqb), 0
		}
		for qb := 0; qb < m.nqb; qb++ {
			r := g*m.nqb + qb
			lo, hi := m.nkb, 0
			for kb, k := range m.kinds[r*m.nkb : (r+1)*m.nkb] {
				if k != BlockEmpty {
					lo, hi = min(lo, kb), kb+1
					cols[2*kb] = min(cols[2*kb], int32(qb))
					cols[2*kb+1] = int32(qb + 1)
				}
			}
			m.rowSpan[2*r], m.rowSpan[2*r+1] = int32(lo), int32(max(lo, hi))
		}
	}
}

// NewBlockMask builds the block mask of the element mask mask: each block
// is classified by mask's BlockClassifier when it has one and decides, and
// otherwise by evaluating mask on the block's rows (stopping as soon as the
// block is known to be partial). Partial blocks apply mask element by
// element when attention runs. The work is spread over GOMAXPROCS
// goroutines; no element-level matrix is ever allocated.
func NewBlockMask(shape BlockShape, mask Mask) (*BlockMask, error) {
	if err := checkMask("mask", mask); err != nil {
		return nil, err
	}
	m, err := newBlockMask(shape)
	if err != nil {
		return nil, err
	}
	if err := checkCovers("mask", mask, m.shape.Batch, m.shape.SeqQ, m.shape.SeqK); err != nil {
		return nil, err
	}
	m.mask = mask
	cls, _ := mask.(BlockClassifier)
	s := m.shape
	rows := s.Batch * s.Heads * m.nqb
	var next atomic.Int64
	var wg sync.WaitGroup
	var fault atomic.Pointer[error]
	// classify classifies rows until none is left; a panic of the user's
	// mask or classifier becomes its error.
	classify := func() (err error) {
		defer recoverCallback(&err, "NewBlockMask: a mask")
		keep := make([]bool, min(s.BlockK, evalChunk))
		for {
			r := int(next.Add(1) - 1)
			if r >= rows {
				return nil
			}
			b, h, qb := r/(s.Heads*m.nqb), r/m.nqb%s.Heads, r%m.nqb
			q0 := qb * s.BlockQ
			q1 := q0 + min(s.BlockQ, s.SeqQ-q0)
			for kb := 0; kb < m.nkb; kb++ {
				k0, k1 := kb*s.BlockK, min(kb*s.BlockK+min(s.BlockK, s.SeqK-kb*s.BlockK), s.SeqK)
				kind := BlockPartial
				if cls != nil {
					kind = cls.Classify(b, h, q0, q1, k0, k1)
				}
				if kind == BlockPartial {
					kind = evalBlock(mask, keep, b, h, q0, q1, k0, k1)
				}
				m.kinds[r*m.nkb+kb] = kind
			}
		}
	}
	for range max(1, min(rows, workersDefault())) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := classify(); err != nil {
				fault.CompareAndSwap(nil, &err)
				next.Store(int64(rows)) // the others stop after their row
			}
		}()
	}
	wg.Wait()
	if err := fault.Load(); err != nil {
		return nil, *err
	}
	m.spans()
	return m, nil
}

// evalChunk is the most keys evalBlock asks a mask about at once.
const evalChunk = 4096

// evalBlock classifies rows [q0, q1) × keys [k0, k1) by evaluating mask row
// by row, len(keep) keys at a time.
func evalBlock(mask Mask, keep []bool, b, h, q0, q1, k0, k1 int) BlockKind {
	seen, hidden := false, false
	for q := q0; q < q1; q++ {
		for j := k0; j < k1; j += len(keep) {
			kp := keep[:min(len(keep), k1-j)]
			for c := range kp {
				kp[c] = true
			}
			mask.Hide(b, h, q, j, kp)
			for _, k := range kp {
				if k {
					seen = true
				} else {
					hidden = true
				}
				if seen && hidden {
					return BlockPartial
				}
			}
		}
	}
	if seen {
		return BlockFull
	}
	return BlockEmpty
}

// BlockFunc says whether block (qb, kb) of batch element b and head h is
// visible. It defines a block-granular mask: visible blocks are full.
type BlockFunc func(b, h, qb, kb int) bool

// BlockMaskFromFunc builds a block-granular mask: block (qb, kb) of (b, h)
// is full where visible returns true and empty elsewhere. A panic of
// visible is an error wrapping ErrInternal.
func BlockMaskFromFunc(shape BlockShape, visible BlockFunc) (_ *BlockMask, err error) {
	defer recoverCallback(&err, "BlockMaskFromFunc: visible")
	if visible == nil {
		return nil, argErr("visible", "BlockMaskFromFunc: visible is nil")
	}
	m, err := newBlockMask(shape)
	if err != nil {
		return nil, err
	}
	s := m.shape
	for b := 0; b < s.Batch; b++ {
		for h := 0; h < s.Heads; h++ {
			for qb := 0; qb < m.nqb; qb++ {
				row := m.kinds[m.row(b, h, qb)*m.nkb:][:m.nkb]
				for kb := range row {
					if visible(b, h, qb, kb) {
						row[kb] = BlockFull
					}
				}
			}
		}
	}
	m.spans()
	return m, nil
}

// BlockMaskFromTable builds a block-granular mask from a table of
// Batch·Heads·nqb·nkb bytes in that order (nqb = ⌈SeqQ/BlockQ⌉, nkb =
// ⌈SeqK/BlockK⌉): a nonzero byte makes its block full, zero empty. The
// table is copied.
func BlockMaskFromTable(shape BlockShape, table []uint8) (*BlockMask, error) {
	m, err := newBlockMask(shape)
	if err != nil {
		return nil, err
	}
	if len(table) != len(m.kinds) {
		return nil, argErr("table", "BlockMaskFromTable: table has %d entries, want %d (batch %d × heads %d × %d × %d blocks)",
			len(table), len(m.kinds), m.shape.Batch, m.shape.Heads, m.nqb, m.nkb)
	}
	for i, x := range table {
		if x != 0 {
			m.kinds[i] = BlockFull
		}
	}
	m.spans()
	return m, nil
}

// blockVis is a BlockMask seen from one sequence (batch coordinate b): its
// rows and keys are the mask's positions qo.. and ko.. (Options.Offsets).
type blockVis struct {
	m      *BlockMask
	b      int
	nq, nk int
	qo, ko int
}

// blocks returns the mask heads [h0, h1) that the query heads of rb map to
// and the mask's query blocks [qb0, qb1) that hold its rows.
func (v *blockVis) blocks(rb rowBlock) (h0, h1, qb0, qb1 int) {
	h0, h1 = rb.h0, rb.h0+rb.nh
	if v.m.shape.Heads == 1 {
		h0, h1 = 0, 1
	}
	return h0, h1, (rb.i0 + v.qo) / v.m.shape.BlockQ, (rb.i1-1+v.qo)/v.m.shape.BlockQ + 1
}

func (v *blockVis) keySpan(rb rowBlock) (lo, hi int) {
	s := v.m.shape
	lo, hi = v.m.nkb, 0
	h0, h1, qb0, qb1 := v.blocks(rb)
	for h := h0; h < h1; h++ {
		for qb := qb0; qb < qb1; qb++ {
			r := v.m.row(v.b, h, qb)
			lo, hi = min(lo, int(v.m.rowSpan[2*r])), max(hi, int(v.m.rowSpan[2*r+1]))
		}
	}
	lo, hi = max(0, lo*s.BlockK-v.ko), min(hi*s.BlockK-v.ko, v.nk)
	return lo, max(lo, hi)
}

func (v *blockVis) nextKey(rb rowBlock, j int) int {
	s := v.m.shape
	h0, h1, qb0, qb1 := v.blocks(rb)
	for kb := (j + v.ko) / s.BlockK; kb < v.m.nkb && kb*s.BlockK-v.ko < v.nk; kb++ {
		for h := h0; h < h1; h++ {
			for qb := qb0; qb < qb1; qb++ {
				if v.m.Kind(v.b, h, qb, kb) != BlockEmpty {
					return max(j, kb*s.BlockK-v.ko)
				}
			}
		}
	}
	return max(j, v.nk)
}

func (v *blockVis) querySpan(h, j0, j1 int) (lo, hi int) {
	s := v.m.shape
	hm := min(h, s.Heads-1)
	g := min(v.b, s.Batch-1)*s.Heads + hm
	lo, hi = v.m.nqb, 0
	for kb := (j0 + v.ko) / s.BlockK; kb <= (j1-1+v.ko)/s.BlockK && kb < v.m.nkb; kb++ {
		c := g*v.m.nkb + kb
		lo, hi = min(lo, int(v.m.colSpan[2*c])), max(hi, int(v.m.colSpan[2*c+1]))
	}
	lo, hi = max(0, lo*s.BlockQ-v.qo), min(hi*s.BlockQ-v.qo, v.nq)
	return lo, max(lo, hi)
}

func (v *blockVis) tile(rb rowBlock, j0, j1 int) BlockKind {
	s := v.m.shape
	h0, h1, qb0, qb1 := v.blocks(rb)
	kind, first := BlockEmpty, true
	for h := h0; h < h1; h++ {
		for qb := qb0; qb < qb1; qb++ {
			row := v.m.kinds[v.m.row(v.b, h, qb)*v.m.nkb:]
			for kb := (j0 + v.ko) / s.BlockK; kb <= (j1-1+v.ko)/s.BlockK; kb++ {
				if first {
					kind, first = row[kb], false
				} else {
					kind = kind.or(row[kb])
				}
				if kind == BlockPartial {
					return kind
				}
			}
		}
	}
	return kind
}

func (v *blockVis) hide(h, i, j0 int, row []float32, keep []bool) {
	s := v.m.shape
	i, j0 = i+v.qo, j0+v.ko // the mask's positions
	kinds := v.m.kinds[v.m.row(v.b, h, i/s.BlockQ)*v.m.nkb:]
	end := j0 + len(row)
	for kb := j0 / s.BlockK; kb*s.BlockK < end; kb++ {
		lo, hi := max(j0, kb*s.BlockK), min(end, (kb+1)*s.BlockK)
		switch kinds[kb] {
		case BlockEmpty:
			for c := lo; c < hi; c++ {
				row[c-j0] = negInf
			}
		case BlockPartial:
			k := keep[:hi-lo]
			for c := range k {
				k[c] = true
			}
			v.m.mask.Hide(v.b, h, i, lo, k)
			hideWhere(row[lo-j0:hi-j0], k)
		}
	}
}
