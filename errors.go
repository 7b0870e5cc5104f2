package flashattn

import (
	"errors"
	"fmt"
)

// An ArgError reports an invalid argument of a call: which argument (Arg)
// and what is wrong with it. Every validation error of Forward, Backward and
// their Into forms is an *ArgError, so a program can map it back to its own
// names (a command line, say, to the file a tensor came from):
//
//	var ae *flashattn.ArgError
//	if errors.As(err, &ae) && ae.Arg == "k" { ... }
//
// Arg is a tensor's name ("q", "k", "v", "out", "lse", "dout", "dq", "dk",
// "dv") or an option's ("Options.Scale", "Options.VarLen.CuSeqlensQ", ...).
type ArgError struct {
	Arg string
	Msg string // the whole message, without the "flashattn: " prefix
}

func (e *ArgError) Error() string { return "flashattn: " + e.Msg }

// argErr builds an *ArgError whose message is the formatted text.
func argErr(arg, format string, a ...any) error {
	return &ArgError{Arg: arg, Msg: fmt.Sprintf(format, a...)}
}

// ErrInternal is wrapped by the error a call returns when a bug inside
// flashattn made one of its workers panic: the panic is recovered and the
// call fails instead of the process. Its outputs are then unspecified.
var ErrInternal = errors.New("flashattn: internal error")
