// Command flashattn runs FlashAttention on NumPy arrays, demonstrates it
// against the plain algorithm, and benchmarks it.
//
//	flashattn attn  -q q.npy -k k.npy -v v.npy -o OUTDIR [options]   attention on .npy files
//	flashattn demo  [-batch B -heads H -seqlen N -headdim D]          flashattn vs plain on random data
//	flashattn bench [flags]                                            GFLOP/s, fraction of the FMA peak, speedup
//	flashattn merge -o OUTDIR DIR...                                   merge attn results over disjoint key sets
//	flashattn train [flags]                                            train a small GPT with flashattn
//	flashattn generate -model FILE [flags]                             sample text from a trained GPT
//	flashattn io    -seqlen N [-headdim D -cache-bytes M ...]          bytes moved to and from a cache of M bytes
//
// Run "flashattn CMD -h" for the flags of each command. Errors are printed
// as one line on stderr and the exit status is non-zero.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/npy"
)

const usage = `flashattn: FlashAttention-2 on the CPU, in Go.

usage:
  flashattn attn  -q q.npy -k k.npy -v v.npy -o OUTDIR [options]
  flashattn demo  [-batch B -heads H -seqlen N -headdim D -causal] [-max-memory SIZE]
  flashattn bench [-json] [-svg FILE] [-reps N] [-min-ms MS] [-max-memory SIZE] [case flags]
  flashattn merge -o OUTDIR DIR...
  flashattn train [-steps N -context T -layers L -heads H -dim D -batch B -attention flash|plain -dropout P -seed S -save FILE -json] [-max-memory SIZE]
  flashattn generate -model FILE [-prompt TEXT -tokens N -temperature T -seed S] [-max-memory SIZE]
  flashattn io    -seqlen N [-headdim D] [-cache-bytes M] [-causal] [-density S] [-mode fwd|bwd|fwdbwd] [-json]

Run "flashattn CMD -h" for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// seams are the test hooks of a run; the zero value is the real command.
type seams struct {
	// writeHook is called before each step of writing attn's and merge's outputs
	// (see npy.WriteOptions.Hook).
	writeHook func(ctx context.Context, stage npy.Stage, path string) error
}

// run executes the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return runSeams(args, stdout, stderr, seams{})
}

// runSeams is run with test hooks.
func runSeams(args []string, stdout, stderr io.Writer, sm seams) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "attn":
		err = runAttn(args[1:], stdout, stderr, sm)
	case "merge":
		err = runMerge(args[1:], stdout, stderr, sm)
	case "demo":
		err = runDemo(args[1:], stdout, stderr)
	case "bench":
		err = runBench(args[1:], stdout, stderr)
	case "train":
		err = runTrain(args[1:], stdout, stderr)
	case "generate":
		err = runGenerate(args[1:], stdout, stderr)
	case "io":
		err = runIO(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "flashattn: unknown command %q (want attn, merge, demo, bench, io, train or generate)\n", args[0])
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	// One line per error (flag validation reports every bad flag).
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(stderr, "flashattn %s: %s\n", args[0], line)
	}
	var se *signalError
	if errors.As(err, &se) {
		return se.exitStatus()
	}
	return 1
}

// errUsage marks a flag-parsing error the flag package already printed.
var errUsage = errors.New("usage")

// newFlags returns a FlagSet that prints its errors as one line.
func newFlags(name string, stderr io.Writer, help string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: flashattn %s %s\n", name, help)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, which hold flags only; a bad flag or an argument
// gives one line on stderr and errUsage.
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	if err := parseArgs(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "flashattn %s: unexpected argument %q (see -h)\n", fs.Name(), fs.Arg(0))
		return errUsage
	}
	return nil
}

// parseSet is parse that also returns the names of the flags set on the
// command line.
func parseSet(fs *flag.FlagSet, args []string, stderr io.Writer) (map[string]bool, error) {
	if err := parse(fs, args, stderr); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	return set, nil
}

// parseArgs parses args, flags and arguments in any order (the arguments
// are left in fs.Args(), in their order; everything after "--" is an
// argument): `merge a b -o m` sets -o like `merge -o m a b`. Go's flag
// package stops at the first argument, which left a later flag unset. A
// bad flag gives one line on stderr and errUsage.
func parseArgs(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(io.Discard)
	var pos []string
	var err error
	for rest := args; ; {
		if err = fs.Parse(rest); err != nil {
			break
		}
		left := fs.Args()
		if n := len(rest) - len(left); n > 0 && rest[n-1] == "--" {
			pos = append(pos, left...) // after "--": arguments only
			break
		}
		if len(left) == 0 {
			break
		}
		pos, rest = append(pos, left[0]), left[1:]
	}
	if err == nil {
		err = fs.Parse(append([]string{"--"}, pos...)) // fs.Args() = pos
	}
	fs.SetOutput(stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	case err != nil:
		fmt.Fprintf(stderr, "flashattn %s: %v (see -h)\n", fs.Name(), err)
		return errUsage
	}
	return nil
}
