package gpu

import "github.com/flashattn/flashattn"

// Options selects what attention computes; the fields mean what the
// same-named fields of flashattn.Options mean. The zero value is plain,
// non-causal attention with scale 1/sqrt(headdim).
type Options struct {
	// Scale multiplies QKᵀ before the softmax; 0 means 1/sqrt(headdim).
	Scale float32

	// Causal masks key j for query row i unless j <= i + Sk - Sq
	// (bottom-right alignment).
	Causal bool

	// Window, if not nil, restricts row i to keys j with
	// i+Sk-Sq-Left <= j <= i+Sk-Sq+Right; -1 leaves a side unbounded.
	Window *flashattn.Window

	// Softcap, if > 0, replaces each scaled score x by Softcap·tanh(x/Softcap).
	Softcap float32

	// VarLen, if not nil, makes the call a variable-length batch: the
	// tensors are packed [total, heads, dim] (Batch 1) and the host slices
	// CuSeqlensQ, CuSeqlensK (and optionally SeqUsedK) say where each
	// sequence starts; they are checked and copied to the device per call.
	VarLen *flashattn.VarLen

	// Deterministic makes the backward pass compute dQ in a separate kernel
	// over query blocks instead of accumulating it with float32 atomics, so
	// that dQ does not depend on the order the GPU runs blocks in. dK and dV
	// are deterministic either way.
	Deterministic bool
}
