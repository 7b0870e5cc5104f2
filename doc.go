// Package flashattn computes exact softmax attention on the CPU with the
// FlashAttention-2 algorithm (Dao et al. 2022; Dao 2023), in pure Go and Go
// assembly.
//
// Q, K and V are cut into tiles that stay in the L1 and L2 caches. For each
// block of query rows, an online softmax keeps the running maximum and sum
// of every row while the K/V tiles stream past, so the seqlen_q × seqlen_k
// score matrix is never stored; only the log-sum-exp of each row is kept. The
// backward pass recomputes the scores tile by tile from Q, K, V, O and the
// log-sum-exp. Tiles that a causal or sliding-window mask hides entirely are
// never visited. Work is spread over batch × heads × query blocks (forward)
// and KV blocks (backward) on a pool of goroutines, and the results are
// bit-identical for any number of workers.
//
// The semantics are flash-attn's (see Options): causal and sliding-window
// masks aligned to the bottom-right corner, softcap, ALiBi, dropout with a
// counter-based generator, GQA/MQA, variable-length batches (VarLen), and
// rows that see no key give O = 0 and LSE = -Inf. Tensors are float32 in
// flash-attn's layout [batch, seqlen, heads, headdim], with optional strides
// (Tensor). Results are checked against the plain algorithm of package
// reference, in float64, by the error rule of flash-attn's test suite.
//
// The arithmetic inside a tile (matrix products, exponentials, row
// reductions) runs in AVX-512 or AVX2+FMA assembly where the CPU has it and
// in Go elsewhere; FLASHATTN_KERNEL=generic|avx2|avx512 forces one.
//
// All functions are safe for concurrent use. Bad input returns an error;
// nothing panics.
package flashattn
