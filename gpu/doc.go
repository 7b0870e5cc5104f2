// Package gpu runs FlashAttention-2 on NVIDIA GPUs (compute capability 8.0
// and newer: A100, H100, ...) from pure Go: the kernels are PTX text,
// generated in Go (gpu/_ptxgen) and embedded in the package, and the CUDA
// driver (libcuda) is opened at run time without cgo and JIT-compiles them.
// Nothing needs installing but the NVIDIA driver.
//
// It computes what package flashattn computes, with the same options and
// the same validation: Options embeds flashattn.Options (scale, causal and
// sliding-window masks aligned to the bottom-right corner, softcap,
// GQA/MQA, variable-length batches, LSE output, backward), for bf16 and
// fp16 inputs (DType, which is half.Format) with float32 accumulation.
// Every bad argument is a *flashattn.ArgError naming it: the rules of
// package flashattn are applied by flashattn.ValidateShape itself, and
// the options the kernels do not implement (ALiBi, dropout, KV caches,
// sinks, masks and score mods, ...) are refused by name, never ignored.
//
// Open returns an error wrapping ErrNoDevice when there is no driver or no
// device; nothing else in the module depends on a GPU.
//
// Two levels of API:
//
//   - device tensors: Device.Alloc gives a Buffer of device memory, filled
//     and read with CopyIn and CopyOut; a Tensor describes a dense
//     [batch, seq, heads, dim] bf16/fp16 tensor in one; Device.Forward and
//     Device.Backward run the kernels on them.
//   - host tensors: Device.ForwardHost and Device.BackwardHost take
//     flashattn.Tensors (float32), round them to the chosen type, run the
//     kernels and return float32 results.
//
// Device.Forward and Device.Backward run on the device's default stream and
// return when it is done; Device.NewStream gives a Stream whose Forward and
// Backward only queue the kernels. A kernel fault makes the CUDA context
// unusable: the call that meets it, and every later one, returns an error
// matching ErrDeviceLost.
//
// The forward kernel follows FlashAttention-2: one thread block per (query
// block of 128 rows, head, batch element), its warps splitting the query
// rows, heaviest blocks first; K and V tiles go through shared memory with
// cp.async, single-buffered and loaded staggered (V of a tile while its
// scores and softmax are computed, K of the next while O += P·V runs);
// S = Q·Kᵀ and O += P·V run on the tensor cores (mma.sync.m16n8k16,
// operands loaded with ldmatrix); the online softmax stays in registers,
// and O is divided by the row sum once at the end. The backward pass is
// parallel over blocks of 128 keys (8 warps); dQ is accumulated with
// float32 atomics into a buffer padded to whole query blocks, or, with
// Options.Deterministic, computed by a second kernel over query blocks so
// that results do not depend on scheduling.
//
// When the forward grid is too small for the device (decoding: few query
// rows, long keys) the forward splits the keys of each query block over
// several thread blocks (split-KV, "flash-decoding"), which write float32
// partial results that a combine kernel merges by their log-sum-exp. The
// number of splits depends on the shape and the device's SM count only;
// Options.NumSplits sets it. With GQA/MQA, when the query rows of the heads
// that share a KV head fit one query block (decoding), the forward packs
// them into one block, which then reads each K/V tile once for all of
// them (Options.NoPackGQA turns it off).
package gpu
