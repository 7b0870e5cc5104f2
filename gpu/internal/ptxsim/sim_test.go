package ptxsim

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flashattn/flashattn/gpu"
)

// The simulator's conversions agree with package gpu's (written differently).
func TestConversionsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(x float32) {
		if got, want := f16ToF32(roundF16(x)), gpu.F16.Round(x); math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Fatalf("f16(%v): sim %v, gpu %v", x, got, want)
		}
		if got, want := bf16ToF32(roundBF16(x)), gpu.BF16.Round(x); math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Fatalf("bf16(%v): sim %v, gpu %v", x, got, want)
		}
	}
	for i := 0; i < 300000; i++ {
		check(math.Float32frombits(rng.Uint32()))
		check(float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(50)-30))))
	}
	for h := 0; h < 1<<16; h++ {
		a, b := float64(f16ToF32(uint16(h))), float64(f16ToF32(uint16(h+1)))
		check(float32(a))
		check(float32((a + b) / 2))
		a, b = float64(bf16ToF32(uint16(h))), float64(bf16ToF32(uint16(h+1)))
		check(float32(a))
		check(float32((a + b) / 2))
	}
}

// A hand-written kernel: one warp copies A (16×16) and B (16 n × 16 k) to
// shared memory with cp.async, loads them with ldmatrix (addresses computed
// here, independently of the generator) and computes C = A·Bᵀ with two mma.
const mmaPTX = `
.version 7.0
.target sm_80
.address_size 64
.extern .shared .align 128 .b8 smem[];
.visible .entry mmatest(
	.param .u64 p_a,
	.param .u64 p_b,
	.param .u64 p_c
)
.maxntid 32, 1, 1
{
	.reg .b32 %r<40>;
	.reg .f32 %f<8>;
	.reg .b64 %rd<12>;
	.reg .pred %p<2>;
	mov.u32 %r0, %tid.x;
	ld.param.u64 %rd0, [p_a];
	ld.param.u64 %rd1, [p_b];
	ld.param.u64 %rd2, [p_c];
	// chunk tid of each 512-byte matrix: A at smem 0, B at smem 512
	mul.wide.u32 %rd3, %r0, 16;
	add.s64 %rd4, %rd0, %rd3;
	add.s64 %rd5, %rd1, %rd3;
	shl.b32 %r1, %r0, 4;
	cp.async.cg.shared.global [%r1], [%rd4], 16, 16;
	cp.async.cg.shared.global [%r1+512], [%rd5], 16, 16;
	cp.async.commit_group;
	cp.async.wait_group 0;
	bar.sync 0;
	// A: row lane&15, chunk lane>>4 (32-byte rows)
	and.b32 %r2, %r0, 15;
	shr.u32 %r3, %r0, 4;
	shl.b32 %r2, %r2, 5;
	shl.b32 %r3, %r3, 4;
	add.u32 %r4, %r2, %r3;
	ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r10, %r11, %r12, %r13}, [%r4];
	// B: row (lane&7) + 8*(lane>>4), chunk (lane>>3)&1
	and.b32 %r5, %r0, 7;
	shr.u32 %r6, %r0, 4;
	shl.b32 %r6, %r6, 3;
	add.u32 %r5, %r5, %r6;
	shl.b32 %r5, %r5, 5;
	shr.u32 %r7, %r0, 3;
	and.b32 %r7, %r7, 1;
	shl.b32 %r7, %r7, 4;
	add.u32 %r8, %r5, %r7;
	ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r20, %r21, %r22, %r23}, [%r8+512];
	mov.f32 %f0, 0f00000000;
	mov.f32 %f1, 0f00000000;
	mov.f32 %f2, 0f00000000;
	mov.f32 %f3, 0f00000000;
	mov.f32 %f4, 0f3F800000;
	mov.f32 %f5, 0f3F800000;
	mov.f32 %f6, 0f3F800000;
	mov.f32 %f7, 0f3F800000;
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f0, %f1, %f2, %f3}, {%r10, %r11, %r12, %r13}, {%r20, %r21}, {%f0, %f1, %f2, %f3};
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f4, %f5, %f6, %f7}, {%r10, %r11, %r12, %r13}, {%r22, %r23}, {%f4, %f5, %f6, %f7};
	// C[16][16] f32: lane holds rows g, g+8, cols 2t, 2t+1 (+8 for the second tile)
	shr.u32 %r30, %r0, 2;
	and.b32 %r31, %r0, 3;
	mul.wide.u32 %rd6, %r30, 64;
	add.s64 %rd6, %rd2, %rd6;
	mul.wide.u32 %rd7, %r31, 8;
	add.s64 %rd6, %rd6, %rd7;
	st.global.v2.f32 [%rd6], {%f0, %f1};
	st.global.v2.f32 [%rd6+512], {%f2, %f3};
	st.global.v2.f32 [%rd6+32], {%f4, %f5};
	st.global.v2.f32 [%rd6+544], {%f6, %f7};
	ret;
}
`

func upload(t *testing.T, m *Machine, b []byte) uint64 {
	p, err := m.Alloc(len(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Write(p, b); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMmaLdmatrix(t *testing.T) {
	mod, err := Parse(mmaPTX)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := mod.Kernel("mmatest")
	rng := rand.New(rand.NewPCG(3, 4))
	var A, B [16][16]float32
	ab, bb := make([]byte, 512), make([]byte, 512)
	for i := 0; i < 16; i++ {
		for j := 0; j < 16; j++ {
			A[i][j], B[i][j] = float32(rng.IntN(9)-4), float32(rng.IntN(9)-4)
			binary.LittleEndian.PutUint16(ab[2*(16*i+j):], roundBF16(A[i][j]))
			binary.LittleEndian.PutUint16(bb[2*(16*i+j):], roundBF16(B[i][j]))
		}
	}
	m := New()
	pa, pb := upload(t, m, ab), upload(t, m, bb)
	pc, _ := m.Alloc(1024)
	if err := m.Launch(k, [3]int{1, 1, 1}, 32, 1024, []uint64{pa, pb, pc}); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 1024)
	m.Read(pc, out)
	for i := 0; i < 16; i++ {
		for j := 0; j < 16; j++ {
			want := float32(0)
			if j >= 8 {
				want = 1 // the second accumulator started at 1
			}
			for kk := 0; kk < 16; kk++ {
				want += A[i][kk] * B[j][kk]
			}
			if got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*(16*i+j):])); got != want {
				t.Fatalf("C[%d][%d] = %v, want %v", i, j, got, want)
			}
		}
	}
}

// kernelText wraps a body in a two-warp kernel with one u64 parameter.
func kernelText(body string) string {
	return `.version 7.0
.target sm_80
.address_size 64
.extern .shared .align 128 .b8 smem[];
.visible .entry k(
	.param .u64 p_x
)
.maxntid 64, 1, 1
{
	.reg .b32 %r<16>;
	.reg .f32 %f<4>;
	.reg .b64 %rd<8>;
	.reg .pred %p<4>;
	mov.u32 %r0, %tid.x;
	shr.u32 %r1, %r0, 5;
	shl.b32 %r2, %r0, 3;
	mov.u32 %r7, 0;
	ld.param.u64 %rd0, [p_x];
` + body + `
	ret;
}
`
}

// The simulator refuses what hardware leaves undefined.
func TestHazards(t *testing.T) {
	cases := []struct {
		name, body, want string
	}{
		{"ok with barrier", "st.shared.b32 [%r2], %r0;\n bar.sync 0;\n xor.b32 %r3, %r2, 256;\n ld.shared.v2.f32 {%f0, %f1}, [%r3];", ""},
		{"read after write, no barrier", "st.shared.b32 [%r2], %r0;\n xor.b32 %r3, %r2, 256;\n ld.shared.v2.f32 {%f0, %f1}, [%r3];", "race"},
		{"write after read, no barrier", "xor.b32 %r3, %r2, 256;\n ld.shared.v2.f32 {%f0, %f1}, [%r3];\n st.shared.b32 [%r2], %r0;", "race"},
		{"cp.async read before wait", "shl.b32 %r4, %r0, 4;\n cp.async.cg.shared.global [%r4], [%rd0], 16, 16;\n cp.async.commit_group;\n ld.shared.v2.f32 {%f0, %f1}, [%r7];", "not completed"},
		{"global out of bounds", "mul.wide.u32 %rd1, %r0, 64;\n add.s64 %rd1, %rd0, %rd1;\n ld.global.f32 %f0, [%rd1];", "outside every allocation"},
		{"divergent shuffle", "setp.lt.u32 %p0, %r0, 16;\n @%p0 bra $L_x;\n shfl.sync.bfly.b32 %r5, %r0, 1, 31, -1;\n$L_x:", "divergence"},
		{"division by zero", "div.u32 %r6, %r0, 0;", "division by zero"},
		{"divergent bra.uni", "setp.lt.u32 %p0, %r0, 16;\n @%p0 bra.uni $L_x;\n$L_x:", "bra.uni taken by 16 of 32"},
		{"vote.all true skips", "setp.lt.u32 %p0, %r0, 64;\n vote.sync.all.pred %p1, %p0, -1;\n @%p1 bra.uni $L_x;\n div.u32 %r6, %r0, 0;\n$L_x:", ""},
		{"vote.all false falls through", "setp.ne.u32 %p0, %r0, 40;\n vote.sync.all.pred %p1, %p0, -1;\n @%p1 bra.uni $L_x;\n div.u32 %r6, %r0, 0;\n$L_x:", "warp 1: line"},
		{"vote.all of a negated predicate", "setp.ne.u32 %p0, %r0, 40;\n vote.sync.all.pred %p1, !%p0, -1;\n @!%p1 bra.uni $L_x;\n div.u32 %r6, %r0, 0;\n$L_x:", ""},
		{"smem overflow", "st.shared.b32 [%r2+4096], %r0;", "past the block"},
	}
	for _, c := range cases {
		mod, err := Parse(kernelText(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		k, _ := mod.Kernel("k")
		m := New()
		x, _ := m.Alloc(1024)
		err = m.Launch(k, [3]int{1, 1, 1}, 64, 1024, []uint64{x})
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// The decoder refuses what it does not implement, or implements
// differently, rather than guessing: each line below fails to compile
// with an error containing want.
func TestDecodeRefuses(t *testing.T) {
	cases := []struct{ line, want string }{
		{"bar.sync 1;", "only bar.sync 0"},
		{"bar.arrive 0;", "only bar.sync 0"},
		{"bra $L_nowhere;", "unknown label"},
		{"bra;", "takes 1 operands"},
		{"xor.pred %p1, %p0, %p0;", "unsupported instruction xor.pred"},
		{"and.pred %p1, %p0;", "takes 3 operands"},
		{"add.u32 %r3, %r0;", "takes 3 operands"},
		{"mad.lo.u32 %r3, %r0, %r1;", "takes 4 operands"},
		{"mul.hi.u32 %r3, %r0, %r1;", "unsupported instruction mul.hi.u32"},
		{"selp.b32 %r3, %r0, %r1;", "takes 4 operands"},
		{"mov.u32 %r3;", "takes 2 operands"},
		{"setp.lt.xor.s32 %p1, %r0, %r1, %p0;", "unsupported setp combiner"},
		{"setp.lo.u32 %p1, %r0, %r1;", "unsupported setp lo.u32"},
		{"setp.lt.s64 %p1, %rd0, %rd0;", "unsupported setp lt.s64"},
		{"@%p0 ;", "no instruction"},
		{"@%p0;", "no instruction after the guard"},
		{"add.u32 %r3, %r0, %q1;", "undeclared register class"},
		{"vote.sync.any.pred %p1, %p0, -1;", "only vote.sync.all.pred"},
	}
	for _, c := range cases {
		_, err := Parse(kernelText(c.line))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error containing %q", c.line, err, c.want)
		}
	}
}
