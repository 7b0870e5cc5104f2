package gpu

import (
	"fmt"

	"github.com/flashattn/flashattn"
)

// argErr returns a *flashattn.ArgError for argument arg (a tensor's or
// parameter's name, or an option's path such as "Options.Scale"): package
// gpu reports every bad argument as one, as package flashattn does.
//
// Msg carries no "gpu: " marker. The rules package gpu shares with package
// flashattn come from flashattn.ValidateShape with its own message, the
// same on the CPU and the GPU; the limits of the GPU kernels say "package
// gpu" (or "the GPU kernels") in their text instead. Errors that are not
// about an argument (no driver, a closed device, a kernel fault) are plain
// errors prefixed "gpu: ".
func argErr(arg, format string, a ...any) error {
	return &flashattn.ArgError{Arg: arg, Msg: fmt.Sprintf(format, a...)}
}
