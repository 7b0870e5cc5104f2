package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Kernel accumulates the text of one PTX .entry. Registers are virtual and
// never reused by the generator (ptxas allocates them); a register that must
// keep its value across the main loop is simply written again in place.
type Kernel struct {
	name    string
	params  []string
	body    strings.Builder
	count   map[string]int // register prefix → registers allocated
	labels  int
	threads int // block size the kernel is written for (.maxntid)
	// minBlocks, when > 0, is the kernel's .minnctapersm: the blocks per SM
	// ptxas must allow for. Without it ptxas 11.8 may pick a register
	// target of its own: it held fwdsplit_*_d64 to 128 registers on sm_90
	// and spilled.
	minBlocks int
}

// regTypes maps a register prefix to its PTX declaration type.
var regTypes = map[string]string{"r": ".b32", "f": ".f32", "rd": ".b64", "p": ".pred", "h": ".b16"}

func newKernel(name string, threads int) *Kernel {
	return &Kernel{name: name, count: map[string]int{}, threads: threads}
}

// param declares a kernel parameter (typ is .u64, .u32, .s32 or .f32).
func (k *Kernel) param(typ, name string) string {
	k.params = append(k.params, fmt.Sprintf("\t.param %s %s", typ, name))
	return name
}

func (k *Kernel) reg(prefix string) string {
	i := k.count[prefix]
	k.count[prefix]++
	return fmt.Sprintf("%%%s%d", prefix, i)
}

// R, F, RD, P and H allocate a .b32, .f32, .b64, .pred and .b16 register.
func (k *Kernel) R() string  { return k.reg("r") }
func (k *Kernel) F() string  { return k.reg("f") }
func (k *Kernel) RD() string { return k.reg("rd") }
func (k *Kernel) P() string  { return k.reg("p") }
func (k *Kernel) H() string  { return k.reg("h") }

// op emits one instruction; the trailing semicolon is added.
func (k *Kernel) op(format string, args ...any) {
	k.body.WriteByte('\t')
	fmt.Fprintf(&k.body, format, args...)
	k.body.WriteString(";\n")
}

// comment emits a comment line.
func (k *Kernel) comment(format string, args ...any) {
	k.body.WriteString("\t// ")
	fmt.Fprintf(&k.body, format, args...)
	k.body.WriteByte('\n')
}

func (k *Kernel) label(l string) { fmt.Fprintf(&k.body, "%s:\n", l) }

// newLabel returns a fresh label name.
func (k *Kernel) newLabel(hint string) string {
	k.labels++
	return fmt.Sprintf("$L_%s_%d", hint, k.labels)
}

// rOp emits "op d, args..." into a new .b32 register d and returns d.
func (k *Kernel) rOp(op string, args ...string) string { return k.opTo(k.R(), op, args) }

// fOp is rOp for an .f32 result.
func (k *Kernel) fOp(op string, args ...string) string { return k.opTo(k.F(), op, args) }

// rdOp is rOp for a .b64 result.
func (k *Kernel) rdOp(op string, args ...string) string { return k.opTo(k.RD(), op, args) }

// pOp is rOp for a predicate result.
func (k *Kernel) pOp(op string, args ...string) string { return k.opTo(k.P(), op, args) }

// opTo emits "op d, args..." and returns d.
func (k *Kernel) opTo(d, op string, args []string) string {
	k.op("%s %s, %s", op, d, strings.Join(args, ", "))
	return d
}

// imm formats an integer immediate.
func imm(v int) string { return fmt.Sprint(v) }

// fimm formats an exact .f32 immediate (0fXXXXXXXX).
func fimm(v float32) string { return fmt.Sprintf("0f%08X", math.Float32bits(v)) }

// String renders the .entry.
func (k *Kernel) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, ".visible .entry %s(\n%s\n)\n.maxntid %d, 1, 1\n", k.name, strings.Join(k.params, ",\n"), k.threads)
	if k.minBlocks > 0 {
		fmt.Fprintf(&s, ".minnctapersm %d\n", k.minBlocks)
	}
	s.WriteString("{\n")
	prefixes := make([]string, 0, len(k.count))
	for p := range k.count {
		prefixes = append(prefixes, p)
	}
	sort.Strings(prefixes)
	for _, p := range prefixes {
		fmt.Fprintf(&s, "\t.reg %s %%%s<%d>;\n", regTypes[p], p, k.count[p])
	}
	s.WriteString(k.body.String())
	s.WriteString("}\n")
	return s.String()
}
