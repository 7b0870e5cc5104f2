package flashattn

// floats.go converts between float64 slices (gonum's, the reference
// package's) and the float32 of Tensor.Data.

// Float64To32 sets dst[i] = float32(src[i]) (rounded to nearest, ties to
// even; magnitudes beyond float32's range become ±Inf) for
// i < min(len(dst), len(src)), and returns that count.
func Float64To32(dst []float32, src []float64) int {
	n := min(len(dst), len(src))
	for i, x := range src[:n] {
		dst[i] = float32(x)
	}
	return n
}

// Float32To64 sets dst[i] = float64(src[i]) (exact) for
// i < min(len(dst), len(src)), and returns that count.
func Float32To64(dst []float64, src []float32) int {
	n := min(len(dst), len(src))
	for i, x := range src[:n] {
		dst[i] = float64(x)
	}
	return n
}
