package tile

import "math"

// The exponential and logarithm constants of the kernels. The kernels work
// in log2 units (ex2.approx, lg2.approx): scores are multiplied by
// scale·Log2E, an LSE in natural-log units becomes LSE·Log2E, and the LSE
// they write is (m + log2 l)·Ln2. The generator emits these values and the
// host computes its parameters from them; a test in package gpu checks the
// committed PTX against them and them against the CPU kernels' exp
// constants, so that none can drift.
const (
	Log2E float32 = math.Log2E
	Ln2   float32 = math.Ln2
)
