package flashattn

// Shape is the size of an attention call, without its data: Q is
// [Batch, SeqQ, Heads, Dim], K is [KVBatch, SeqK, KVHeads, Dim] and V is
// [KVBatch, SeqK, KVHeads, DimV] (O and dO then have DimV too: MLA's value
// head dim). KVHeads 0 means Heads, KVBatch 0 means Batch and DimV 0 means
// Dim.
//
// With Options.VarLen, Batch is 1 and SeqQ, SeqK are the packed totals. With
// Options.KVCache, K and V are the cache: SeqK is its length per row
// (cache_len) or, paged, its block size, and KVBatch its number of rows
// (with BatchIdx) or of blocks (with BlockTable).
type Shape struct {
	Batch, Heads, KVHeads int
	SeqQ, SeqK, Dim       int
	KVBatch               int
	DimV                  int
}

// TrafficShape is the Shape whose traffic CountTraffic counts.
//
// Deprecated: TrafficShape is an alias of Shape; use Shape.
type TrafficShape = Shape

// Resolved returns s with its defaults filled in: KVHeads 0 becomes Heads,
// KVBatch 0 Batch and DimV 0 Dim. Package gpu resolves its shapes with it.
func (s Shape) Resolved() Shape {
	if s.KVHeads == 0 {
		s.KVHeads = s.Heads
	}
	if s.KVBatch == 0 {
		s.KVBatch = s.Batch
	}
	if s.DimV == 0 {
		s.DimV = s.Dim
	}
	return s
}

// check refuses sizes below 1 (KVHeads and KVBatch may be 0: defaults)
// and sizes whose element counts overflow int.
func (s Shape) check() error {
	if s.Batch < 1 || s.Heads < 1 || s.KVHeads < 0 || s.KVBatch < 0 || s.DimV < 0 || s.SeqQ < 1 || s.SeqK < 1 || s.Dim < 1 {
		return argErr("shape", "shape %+v: Batch, Heads, SeqQ, SeqK and Dim must be ≥ 1 (KVHeads, KVBatch, DimV ≥ 0)", s)
	}
	r := s.Resolved()
	for _, t := range [][4]int{{r.Batch, r.SeqQ, r.Heads, max(r.Dim, r.DimV)}, {r.KVBatch, r.SeqK, r.KVHeads, max(r.Dim, r.DimV)}} {
		n, ok := mulAdd(t[0], t[1], 0)
		if ok {
			n, ok = mulAdd(n, t[2], 0)
		}
		if ok {
			_, ok = mulAdd(n, t[3], 0)
		}
		if !ok {
			return argErr("shape", "shape %+v is too large: its size overflows int", s)
		}
	}
	return nil
}

// shapeOf is the shape of a call on q, k and v.
func shapeOf(q, k, v Tensor) Shape {
	return Shape{Batch: q.Batch, Heads: q.Heads, KVHeads: k.Heads, SeqQ: q.Seq, SeqK: k.Seq, Dim: q.Dim, KVBatch: k.Batch, DimV: v.Dim}
}

// ValidateShape reports whether Forward and Backward accept a call of
// shape s with opts, without any tensor: it applies every rule that does
// not depend on the tensors' element types and memory (those are checked
// when the call is made) — option values, shapes against each other,
// cu_seqlens, the KV cache's tables, new keys and rotary tables, ALiBi
// slopes, block masks — and returns the *ArgError the call would return,
// or nil. It allocates nothing that grows with the sequence length.
//
// Engines can use it to check a configuration once, before running it;
// package gpu uses it so that it follows the same rules.
func ValidateShape(s Shape, opts *Options) error {
	if err := s.check(); err != nil {
		return err
	}
	if opts == nil {
		opts = &Options{}
	}
	if err := opts.validate(); err != nil {
		return err
	}
	var t tiling
	return t.build(s.Resolved(), opts, tileParams{cacheBytes: TileCacheBytes(), fitBackward: true})
}
