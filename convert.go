package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// Convert copies src into dst, which must have src's shape, converting the
// elements to dst's type: rounding to nearest even for bfloat16 and
// float16, quantising each block of 32 values for q8_0 and q4_0 (as
// llama.cpp's quantize_row_q8_0 and quantize_row_q4_0 do; NaN, Inf and
// values too large for the fp16 scale
// are an error), rounding x/dst.Scale to nearest even for fp8 (saturating;
// see FP8E4M3). Use it to fill a compact KV cache.
func Convert(dst, src Tensor) error {
	sv, err := src.check("src", false, -1, -1, -1, -1)
	if err != nil {
		return err
	}
	dv, err := dst.check("dst", true, src.Batch, src.Seq, src.Heads, src.Dim)
	if err != nil {
		return err
	}
	if overlaps(viewRegion(dv), viewRegion(sv)) {
		return argErr("dst", "dst shares memory with src")
	}
	kern := kernel.Active().Impl
	row := make([]float32, src.Dim)
	for b := 0; b < src.Batch; b++ {
		for s := 0; s < src.Seq; s++ {
			for h := 0; h < src.Heads; h++ {
				sv.rowTo(row, b, s, h, Float32, &kern)
				if err := dv.storeRow(row, b, s, h, &kern); err != nil {
					return argErr("src", "src row (%d, %d, %d): %v", b, s, h, err)
				}
			}
		}
	}
	return nil
}
