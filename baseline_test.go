package flashattn

import (
	"github.com/flashattn/flashattn/internal/kernel"
	"github.com/flashattn/flashattn/reference"
)

// plainPar returns par for the plain float32 baseline of what runs: the
// products of the scores (and of dP) fused where the active float32
// kernels fuse them (kernel.Impl.FusedScores: the avx512, avx2 and neon
// kernels), as SPEC §4 says; unfused with the generic (pure-Go) ones. Tests call it at the reference call, after
// forcing the kernels they run.
func plainPar(par reference.Params) reference.Params {
	par.FusedScores = kernel.Active().Impl.FusedScores
	return par
}
