// Package ptxsim interprets the subset of PTX that flashattn's kernel
// generator emits, so that the generated kernels can be run and checked on
// a machine without a GPU. It is a test tool, not a GPU model: it executes
// each warp's 32 lanes in lockstep (refusing warp-collective instructions
// executed by a partial warp), runs the warps of a block one after another
// between barriers, and reports what real hardware would leave undefined:
// shared-memory accesses by two warps without a barrier between them
// (at least one a write), reads of shared memory an unfinished cp.async
// copy targets, out-of-bounds shared or global accesses, and division by
// zero. Arithmetic is IEEE single precision with correctly rounded
// results where PTX's approximate instructions (ex2.approx, rcp.approx,
// lg2.approx) only promise a few ulps; mma.sync uses the fragment layouts
// of package tile (the PTX ISA's) and accumulates in float64 before one
// rounding.
package ptxsim

import (
	"fmt"
	"strconv"
	"strings"
)

// Module is a parsed PTX module.
type Module struct {
	kernels map[string]*Kernel
}

// Kernel is one compiled .entry.
type Kernel struct {
	Name   string
	params []param
	slots  map[string]int // register prefix → first slot
	counts map[string]int // register prefix → registers declared
	nslots int
	code   []*inst
	labels map[string]int
}

type param struct {
	name string
	size int
	off  int
}

// Parse parses and compiles a module.
func Parse(text string) (*Module, error) {
	m := &Module{kernels: map[string]*Kernel{}}
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, ".visible .entry ") {
			continue
		}
		k := &Kernel{slots: map[string]int{}, counts: map[string]int{}, labels: map[string]int{}}
		k.Name = strings.TrimSuffix(strings.TrimPrefix(l, ".visible .entry "), "(")
		off := 0
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != ")"; i++ {
			f := strings.Fields(strings.TrimSuffix(strings.TrimSpace(lines[i]), ","))
			if len(f) != 3 || f[0] != ".param" {
				return nil, fmt.Errorf("ptxsim: %s: bad parameter line %q", k.Name, lines[i])
			}
			size := 4
			if f[1] == ".u64" {
				size = 8
			}
			off = (off + size - 1) / size * size
			k.params = append(k.params, param{name: f[2], size: size, off: off})
			off += size
		}
		// Skip to the body.
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "{"; i++ {
		}
		var body []string
		var lineNo []int
		for i++; i < len(lines) && lines[i] != "}"; i++ {
			body = append(body, strings.TrimSpace(lines[i]))
			lineNo = append(lineNo, i+1)
		}
		if err := k.compile(body, lineNo); err != nil {
			return nil, err
		}
		m.kernels[k.Name] = k
	}
	if len(m.kernels) == 0 {
		return nil, fmt.Errorf("ptxsim: no .entry in module")
	}
	return m, nil
}

// Kernel returns the named kernel.
func (m *Module) Kernel(name string) (*Kernel, error) {
	k, ok := m.kernels[name]
	if !ok {
		return nil, fmt.Errorf("ptxsim: no kernel %q", name)
	}
	return k, nil
}

// Params returns the byte size of each parameter, in order.
func (k *Kernel) Params() []int {
	s := make([]int, len(k.params))
	for i, p := range k.params {
		s[i] = p.size
	}
	return s
}

func (k *Kernel) compile(body []string, lineNo []int) error {
	// Registers first, labels second (forward branches), then instructions.
	var insts []string
	var instLine []int
	for i, l := range body {
		switch {
		case l == "" || strings.HasPrefix(l, "//"):
		case strings.HasPrefix(l, ".reg "):
			// .reg .f32 %f<455>;
			f := strings.Fields(strings.TrimSuffix(l, ";"))
			spec := f[2] // %f<455>
			lt := strings.Index(spec, "<")
			prefix := spec[1:lt]
			n, err := strconv.Atoi(strings.TrimSuffix(spec[lt+1:], ">"))
			if err != nil {
				return fmt.Errorf("ptxsim: %s line %d: %q", k.Name, lineNo[i], l)
			}
			k.slots[prefix] = k.nslots
			k.counts[prefix] = n
			k.nslots += n
		case strings.HasSuffix(l, ":"):
			k.labels[strings.TrimSuffix(l, ":")] = len(insts)
		default:
			insts = append(insts, l)
			instLine = append(instLine, lineNo[i])
		}
	}
	for i, l := range insts {
		in, err := k.decode(strings.TrimSuffix(l, ";"))
		if err != nil {
			return fmt.Errorf("ptxsim: %s line %d: %q: %w", k.Name, instLine[i], l, err)
		}
		in.text, in.line = l, instLine[i]
		k.code = append(k.code, in)
	}
	return nil
}

// splitOperands splits at top-level commas.
func splitOperands(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if t := strings.TrimSpace(s[start:]); t != "" {
		out = append(out, t)
	}
	return out
}

// reg returns the slot of register name (%r12).
func (k *Kernel) reg(name string) (int, error) {
	if !strings.HasPrefix(name, "%") {
		return 0, fmt.Errorf("not a register: %q", name)
	}
	i := 1
	for i < len(name) && (name[i] < '0' || name[i] > '9') {
		i++
	}
	base, ok := k.slots[name[1:i]]
	if !ok {
		return 0, fmt.Errorf("undeclared register class in %q", name)
	}
	n, err := strconv.Atoi(name[i:])
	if err != nil || n < 0 || n >= k.counts[name[1:i]] {
		return 0, fmt.Errorf("bad or undeclared register %q", name)
	}
	return base + n, nil
}
