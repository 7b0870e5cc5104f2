package main

import (
	"fmt"
	"sort"
	"strings"
)

// The emitter: a Go assembly file built line by line. Loads, stores,
// integer arithmetic and branches are written in Go's own arm64 syntax;
// every vector data-processing instruction is written as a WORD with its
// GNU assembler text as the comment (the Go assembler knows few of them),
// encoded by enc.go. The texts and words are collected so that the tests
// can compare every one with GNU as (enc_test.go) and with the committed
// table internal/kernel/testdata/arm64_encodings.txt.

// file is the assembly file being generated.
type file struct {
	b     strings.Builder
	stubs strings.Builder
	words map[string]uint32 // GNU text → encoding, every WORD emitted
	data  strings.Builder   // DATA/GLOBL blocks, written at the end
	fn    *fnState
	fp8   fp8Regs // the registers of widenFP8 in the kernel being generated
}

// fnState is the function being generated.
type fnState struct {
	name   string
	params []param
	labels map[string]bool
}

func newFile() *file {
	return &file{words: map[string]uint32{}}
}

// param is one argument or result of a function, at offset off(FP).
type param struct {
	name string
	typ  string
	off  int
}

// sizeAlign returns the size and alignment of the Go types the kernels
// take, on arm64.
func sizeAlign(typ string) (int, int) {
	switch {
	case strings.HasPrefix(typ, "[]"):
		return 24, 8
	case typ == "int" || strings.HasPrefix(typ, "*"):
		return 8, 8
	case typ == "float32" || typ == "uint32":
		return 4, 4
	}
	panic("unknown type " + typ)
}

// parseSig lays out the frame of the Go signature sig, "func(a, b int, x
// []float32) float32", as ABI0 does: arguments in order, results from the
// next multiple of 8. A single unnamed result is named ret.
func parseSig(sig string) (params []param, argSize int) {
	sig = strings.TrimPrefix(sig, "func(")
	i := strings.Index(sig, ")")
	args, res := sig[:i], strings.TrimSpace(sig[i+1:])
	off := 0
	place := func(name, typ string) {
		sz, al := sizeAlign(typ)
		off = (off + al - 1) / al * al
		params = append(params, param{name, typ, off})
		off += sz
	}
	var names []string
	for _, f := range strings.Split(args, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if sp := strings.Index(f, " "); sp >= 0 {
			names = append(names, f[:sp])
			typ := strings.TrimSpace(f[sp+1:])
			for _, n := range names {
				place(n, typ)
			}
			names = nil
		} else {
			names = append(names, f)
		}
	}
	if res != "" {
		off = (off + 7) / 8 * 8
		place("ret", res)
	}
	return params, off
}

// text starts function name with Go signature sig and doc comment lines.
func (f *file) text(name, sig string, doc ...string) {
	params, size := parseSig(sig)
	f.fn = &fnState{name: name, params: params, labels: map[string]bool{}}
	fmt.Fprintf(&f.b, "\n")
	for _, d := range doc {
		fmt.Fprintf(&f.b, "// %s\n", d)
	}
	fmt.Fprintf(&f.b, "TEXT ·%s(SB), NOSPLIT|NOFRAME, $0-%d\n", name, size)
	for i, d := range doc {
		if i == 0 {
			fmt.Fprintf(&f.stubs, "\n")
		}
		fmt.Fprintf(&f.stubs, "// %s\n", d)
	}
	fmt.Fprintf(&f.stubs, "//\n//go:noescape\nfunc %s%s\n", name, strings.TrimPrefix(sig, "func"))
}

// arg returns the FP operand of parameter name; part is "", "base",
// "len" or "cap" (slices).
func (f *file) arg(name, part string) string {
	for _, p := range f.fn.params {
		if p.name != name {
			continue
		}
		switch part {
		case "":
			return fmt.Sprintf("%s+%d(FP)", name, p.off)
		case "base":
			return fmt.Sprintf("%s_base+%d(FP)", name, p.off)
		case "len":
			return fmt.Sprintf("%s_len+%d(FP)", name, p.off+8)
		case "cap":
			return fmt.Sprintf("%s_cap+%d(FP)", name, p.off+16)
		}
	}
	panic("no parameter " + name + " in " + f.fn.name)
}

// ld loads the 64-bit parameter (or slice part) into register r.
func (f *file) ld(r, name, part string) { f.i("MOVD %s, %s", f.arg(name, part), r) }

// i emits one line of Go assembly.
func (f *file) i(format string, args ...any) {
	fmt.Fprintf(&f.b, "\t"+format+"\n", args...)
}

// comment emits a comment line.
func (f *file) comment(format string, args ...any) {
	fmt.Fprintf(&f.b, "\t// "+format+"\n", args...)
}

// label emits a label, unique within the function.
func (f *file) label(l string) {
	if f.fn.labels[l] {
		panic("duplicate label " + l + " in " + f.fn.name)
	}
	f.fn.labels[l] = true
	fmt.Fprintf(&f.b, "%s:\n", l)
}

// w emits an encoded instruction.
func (f *file) w(in inst) {
	if old, ok := f.words[in.text]; ok && old != in.word {
		panic(fmt.Sprintf("%s encoded as %#08x and %#08x", in.text, old, in.word))
	}
	f.words[in.text] = in.word
	fmt.Fprintf(&f.b, "\tWORD $0x%08x // %s\n", in.word, in.text)
}

// ret ends the function.
func (f *file) ret() {
	f.i("RET")
	f.fn = nil
}

// constTable emits a read-only table of 32-bit words.
func (f *file) constTable(name string, vals []uint32) {
	for i, v := range vals {
		fmt.Fprintf(&f.data, "DATA %s<>+%d(SB)/4, $0x%08x\n", name, 4*i, v)
	}
	fmt.Fprintf(&f.data, "GLOBL %s<>(SB), RODATA|NOPTR, $%d\n\n", name, 4*len(vals))
}

// sortedWords returns the collected encodings sorted by text.
func (f *file) sortedWords() []inst {
	var ins []inst
	for t, w := range f.words {
		ins = append(ins, inst{t, w})
	}
	sort.Slice(ins, func(i, j int) bool { return ins[i].text < ins[j].text })
	return ins
}
