package main

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gnuAs is the GNU assembler for aarch64 the tests compare with.
const gnuAs = "aarch64-linux-gnu-as"

// gnuWords assembles texts, one instruction each, with GNU as (all the
// features the kernels use enabled) and returns their encodings in order.
// It skips the test when the assembler is not installed (Debian/Ubuntu:
// apt-get install binutils-aarch64-linux-gnu).
func gnuWords(t *testing.T, texts []string) []uint32 {
	t.Helper()
	as, err := exec.LookPath(gnuAs)
	if err != nil {
		t.Skipf("%s not installed: encodings checked against the committed table only", gnuAs)
	}
	objcopy := strings.TrimSuffix(as, "as") + "objcopy"
	dir := t.TempDir()
	src := filepath.Join(dir, "t.s")
	var b strings.Builder
	b.WriteString(".text\n")
	for _, s := range texts {
		b.WriteString(s + "\n")
	}
	if err := os.WriteFile(src, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	obj, bin := filepath.Join(dir, "t.o"), filepath.Join(dir, "t.bin")
	if out, err := exec.Command(as, "-march=armv8.6-a+bf16+fp16+fp16fml", "-o", obj, src).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", gnuAs, err, out)
	}
	if out, err := exec.Command(objcopy, "-O", "binary", "--only-section=.text", obj, bin).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != 4*len(texts) {
		t.Fatalf("GNU as produced %d bytes for %d instructions", len(raw), len(texts))
	}
	words := make([]uint32, len(texts))
	for i := range words {
		words[i] = binary.LittleEndian.Uint32(raw[4*i:])
	}
	return words
}

// sampleInsts exercises every encoder function with registers and lanes
// that set each field's high and low bits.
func sampleInsts() []inst {
	var ins []inst
	regs := [][3]V{{0, 1, 2}, {31, 30, 29}, {17, 8, 23}}
	for _, r := range regs {
		d, n, m := r[0], r[1], r[2]
		for _, f := range []func(d, n, m V) inst{fadd, fsub, fmul, fdiv, fmax, fmin, fmaxnm, fmla, fmls, fcmeq, fcmgt, fcmge, fabd, faddp, fmaxnmp,
			vand, vbic, vorr, veor, vbsl, vbit, vbif, bfdot, bfmmla, fmlal, umull, umull2} {
			ins = append(ins, f(d, n, m))
		}
		for _, a := range []arr{s4, h8, b16, d2, s2, h4, b8} {
			for _, f := range []func(a arr, d, n, m V) inst{vadd, vsub, zip1, zip2, uzp1, uzp2, trn1, trn2} {
				ins = append(ins, f(a, d, n, m))
			}
		}
		ins = append(ins, vmov(d, n), ext(d, n, m, 4), ext(d, n, m, 12), fmaddS(d, n, m, r[0]^5), faddS(d, n, m), fmaxnmS(d, n, m))
		for i := 0; i < 4; i++ {
			ins = append(ins, fmlaE(d, n, m, i), fmlsE(d, n, m, i), fmulE(d, n, m, i), bfdotE(d, n, m, i), dupE(d, n, i))
		}
		for i := 0; i < 8; i++ {
			ins = append(ins, fmlalE(d, n, m&15, i), fmlal2E(d, n, m&15, i))
		}
		for _, f := range []func(d, n V) inst{frintn, fcvtzs, scvtf, fabs, fneg, fcvtl, fcvtl2, fcvtn, fcvtn2, fmaxnmv, addv, faddpS} {
			ins = append(ins, f(d, n))
		}
		for _, s := range []int{1, 7, 13, 16} {
			ins = append(ins, shl(s4, d, n, s), ushr(s4, d, n, s), sshr(s4, d, n, s), usra(s4, d, n, s), shrn(d, n, s))
		}
		for _, s := range []int{0, 1, 7, 15} {
			ins = append(ins, ushll(h4, d, n, s), ushll2(h8, d, n, s), sshll(h4, d, n, s), sshll2(h8, d, n, s))
		}
		ins = append(ins, shll(d, n), shll2(d, n))
		for _, s := range []int{1, 7, 15} {
			ins = append(ins, shl(h8, d, n, s), ushr(h8, d, n, s))
		}
		ins = append(ins, sshll(b8, d, n, 0), sshll2(b16, d, n, 0), shl(d2, d, n, 32), ushr(d2, d, n, 32), ushll(s2, d, n, 0))
		ins = append(ins, movi0(d), movi(s4, d, 0x7f, 0), movi(s4, d, 0xc3, 8), movi(s4, d, 0x40, 16), movi(s4, d, 0x01, 24),
			movi(h8, d, 0x40, 0), movi(h8, d, 0xff, 8), moviB(d, 0x0f), moviB(d, 0xa5), dupW(d, int(n)%30))
		for _, s := range []int{1, 4, 7} {
			ins = append(ins, ushr(b16, d, n, s), ushr(b8, d, n, s))
		}
	}
	return ins
}

// TestEncoderGNU compares every encoder function with GNU as.
func TestEncoderGNU(t *testing.T) {
	ins := sampleInsts()
	texts := make([]string, len(ins))
	for i, in := range ins {
		texts[i] = in.text
	}
	words := gnuWords(t, texts)
	for i, in := range ins {
		if in.word != words[i] {
			t.Errorf("%s: encoded %#08x, GNU as %#08x", in.text, in.word, words[i])
		}
	}
}
