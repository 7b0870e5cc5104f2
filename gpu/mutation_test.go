package gpu

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// kernelMutation is a deliberate bug put into one kernel of the committed
// PTX: the interpreter test of the case below must fail with it. Each is
// a mistake that looks harmless in the PTX and that real hardware would
// mostly forgive or turn into wrong numbers rarely: a missing barrier, a
// wrong cp.async wait count, swapped conversion operands, a missing
// .trans, copies without zero-fill, an off-by-one mask bound; and in the
// split-KV kernels, a combine that leaves a split out, split ranges that
// leave key tiles out, a partial LSE in the wrong units.
type kernelMutation struct {
	name   string
	kernel string // in the bf16 d64 module
	re     *regexp.Regexp
	repl   string
	first  bool     // replace the first match only
	on     *gpuCase // the case that must fail (nil: mutationCase)
}

var kernelMutations = []kernelMutation{
	{name: "no barrier after the K wait", kernel: "fwd_bf16_d64",
		re: regexp.MustCompile(`(\$L_loop_\d+:\n\tcp\.async\.wait_group 0;\n)\tbar\.sync 0;\n`), repl: "$1"},
	{name: "cp.async.wait_group 1 before reading K and V", kernel: "fwd_bf16_d64",
		re: regexp.MustCompile(`(\$L_loop_\d+:\n\tcp\.async\.)wait_group 0;`), repl: "${1}wait_group 1;"},
	{name: "next K and V copied into the buffer being read", kernel: "fwd_bf16_d64", first: true,
		re: regexp.MustCompile(`xor\.b32 (%r\d+), (%r\d+), 16384;`), repl: "xor.b32 $1, $2, 0;"},
	{name: "cvt operands swapped", kernel: "fwd_bf16_d64",
		re: regexp.MustCompile(`(cvt\.rn\.bf16x2\.f32 %r\d+), (%f\d+), (%f\d+);`), repl: "$1, $3, $2;"},
	{name: "ldmatrix of V without .trans", kernel: "fwd_bf16_d64",
		re: regexp.MustCompile(`ldmatrix\.sync\.aligned\.m8n8\.x4\.trans\.`), repl: "ldmatrix.sync.aligned.m8n8.x4."},
	{name: "no zero-fill of rows past the sequence", kernel: "bwd_bf16_d64",
		re: regexp.MustCompile(`(cp\.async\.c[ag]\.shared\.global \[[^]]+\], \[[^]]+\], \d+), %r\d+;`), repl: "$1;"},
	{name: "mask bound off by one", kernel: "fwd_bf16_d64",
		re: regexp.MustCompile(`setp\.le\.or\.s32`), repl: "setp.lt.or.s32"},
	{name: "no barrier between the P and dS stores and their loads", kernel: "bwd_bf16_d64",
		re: regexp.MustCompile(`\tbar\.sync 0;\n(\t// dV \+= P\^T dO, dK \+= dS\^T Q\n)`), repl: "$1"},
	{name: "dQ conversion reads the unpadded layout", kernel: "convdq_bf16", first: true,
		re: regexp.MustCompile(`ld\.param\.u32 (%r\d+), \[p_in_bs\];`), repl: "ld.param.u32 $1, [p_out_bs];"},
	{name: "combine ignores the last split", kernel: "fwdcombine_bf16_d64", on: &splitMutationCase,
		re: regexp.MustCompile(`(mov\.u32 %r\d+, )0;(\n\tmov\.u64 %rd\d+, %rd\d+;\n\tmov\.u64 %rd\d+, %rd\d+;\n\$L_merge_)`), repl: "${1}1;$2"},
	{name: "split ranges rounded down", kernel: "fwdsplit_bf16_d64", on: &splitMutationCase,
		re: regexp.MustCompile(`(max\.s32 %r\d+, %r\d+, 0;\n\tadd\.u32 %r\d+, %r\d+, )%r\d+;\n\tsub\.u32 (%r\d+), (%r\d+), 1;`), repl: "${1}0;\n\tsub.u32 $2, $3, 0;"},
	{name: "partial LSE in log2 units", kernel: "fwdsplit_bf16_d64", on: &splitMutationCase,
		re: regexp.MustCompile(`mul\.f32 (%f\d+), (%f\d+), 0f3F317218;`), repl: "mul.f32 $1, $2, 0f3F800000;"},
}

// mutationCase is small, causal, GQA, with query and key counts that are
// not multiples of any block, run forward and (atomic) backward.
var mutationCase = gpuCase{name: "mutation", batch: 2, sq: 77, sk: 131, h: 2, hk: 1, dim: 64, causal: true}

// splitMutationCase is a causal MQA decode shape split in 3 parts of its
// 11 key tiles (so that rounding the parts down leaves tiles out).
var splitMutationCase = gpuCase{name: "split-mutation", batch: 1, sq: 3, sk: 700, h: 2, hk: 1, dim: 64, causal: true, noBwd: true, splits: 3}

// mutateKernel applies m to the body of its kernel in a module's text and
// reports whether it changed anything.
func mutateKernel(text string, m kernelMutation) (string, bool) {
	start := strings.Index(text, ".visible .entry "+m.kernel+"(")
	if start < 0 {
		return text, false
	}
	end := start + strings.Index(text[start:], "\n}\n")
	body := text[start:end]
	var out string
	if m.first {
		loc := m.re.FindStringSubmatchIndex(body)
		if loc == nil {
			return text, false
		}
		out = body[:loc[0]] + string(m.re.ExpandString(nil, m.repl, body, loc)) + body[loc[1]:]
	} else {
		out = m.re.ReplaceAllString(body, m.repl)
	}
	return text[:start] + out + text[end:], out != body
}

// Every mutation makes the interpreter test fail (an error from the
// interpreter's hazard checks, or results outside the same-type bound),
// while the unmutated kernels pass the same case: the tests would catch
// these bugs. Under -race, every third mutation (of both cases): the
// interpreter starts no goroutines, so the race detector finds nothing more
// in the rest; the plain run checks every mutation.
func TestMutationsCaught(t *testing.T) {
	for _, c := range []gpuCase{mutationCase, splitMutationCase} {
		if errs := c.check(newSimDevice(), BF16, 1); len(errs) != 0 {
			t.Fatalf("unmutated kernels fail the %s case: %v", c.name, errs)
		}
	}
	for i, m := range kernelMutations {
		if raceEnabled && i%3 != 0 {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			c := mutationCase
			if m.on != nil {
				c = *m.on
			}
			d := newSimDevice()
			s := d.ctx.backend.(*sim)
			changed := false
			s.mutate = func(text string) string {
				if !strings.Contains(text, ".entry "+m.kernel+"(") {
					return text
				}
				text, ok := mutateKernel(text, m)
				changed = changed || ok
				return text
			}
			errs := c.check(d, BF16, 1)
			if !changed {
				t.Fatalf("the mutation matched nothing in %s: the test would be vacuous", m.kernel)
			}
			if len(errs) == 0 {
				t.Fatalf("%s with %q passes the interpreter test", m.kernel, m.name)
			}
			t.Logf("caught: %v", fmt.Sprint(errs[0])[:min(160, len(fmt.Sprint(errs[0])))])
		})
	}
}
