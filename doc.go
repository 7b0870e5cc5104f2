// Package flashattn computes exact softmax attention on the CPU with the
// FlashAttention-2 algorithm (Dao et al. 2022; Dao 2023), in pure Go and Go
// assembly, with no cgo.
//
// Q, K and V are cut into tiles that stay in the L1 and L2 caches. For each
// block of query rows, an online softmax keeps the running maximum and sum
// of every row while the K/V tiles stream past, so the seqlen_q × seqlen_k
// score matrix is never stored; only the log-sum-exp of each row is kept. The
// backward pass recomputes the scores tile by tile from Q, K, V, O and the
// log-sum-exp. Tiles that a mask hides entirely are never visited (the
// block-sparse FlashAttention of the paper). Work is spread over batch ×
// heads × query blocks (forward) and KV blocks (backward) on a pool of
// goroutines, and the results are bit-identical for any number of workers.
//
// The semantics are flash-attn's (see Options): causal and sliding-window
// masks aligned to the bottom-right corner, softcap, ALiBi, dropout with a
// counter-based generator, GQA/MQA, variable-length batches (VarLen), and
// rows that see no key give O = 0 and LSE = −Inf; decoding from a KV cache,
// contiguous or paged, with new keys appended in place and rotary
// embeddings (KVCache); and PyTorch FlexAttention's programmable attention:
// block-sparse masks (BlockMask), element masks (Mask) and score modifiers
// with their derivatives (ScoreMod), forward and backward. MergeStates
// combines results over disjoint key sets.
//
// Tensors are in flash-attn's layout [batch, seqlen, heads, headdim], with
// any non-overlapping strides (Tensor), of float32, bfloat16 or float16
// elements (package half). With 16-bit inputs, products take 16-bit
// operands and accumulate in float32 (S, the softmax state, O, dQ, dK, dV);
// P is rounded to the type before P·V and dS before the gradient products,
// as flash-attn does; LSE is float32. With mixed types a float32 q (or k,
// v) is rounded to the 16-bit type of the others before the products, a
// quantised cache leaves them float32 (see "Mixed element types" on DType).
//
// Results are checked against the plain algorithm of package reference, in
// float64, by the error rule of flash-attn's test suite: at most twice the
// error of the plain algorithm in the same type, plus 1e-6 (float32), 1e-3
// (bfloat16) or 1e-4 (float16).
//
// The arithmetic inside a tile runs in AVX-512 or AVX2+FMA assembly where
// the CPU has it and in Go elsewhere; bfloat16 products use AMX tiles or
// AVX512_BF16 where present, whichever measures fastest. The environment
// variable FLASHATTN_KERNEL, read once at the first call, forces a choice:
// "generic" is pure Go everywhere, "avx2" the AVX2 kernels, and
// "avx512,bf16=amx,f16=generic" names one per family (f32, decode, bf16,
// f16); a name this CPU lacks is ignored.
//
// All functions are safe for concurrent use. Bad input returns an error
// (an *ArgError naming the argument); nothing panics, and a bug that makes
// a worker panic becomes an error wrapping ErrInternal.
package flashattn
