package kernel

import (
	"fmt"
	"math"
)

// selfCheckDecode runs every kernel of dk once on a small ragged problem
// and compares it with GenericDecode. It guards CPUs the assembly never ran
// on in development: a set that disagrees is not used. The shapes reach
// every row tile (31 rows = 16+8+4+2+1), keys that are not a multiple of
// any tile (37) and a head dimension with a tail for both vector widths
// (45; q8_0 and q4_0: 96), for every format, with padded strides. The tolerance is 1e-5·Σ|terms|
// per element, which two float32 sums of at most 45 terms in any order
// always meet (each is within 45·2⁻²⁴·Σ|terms| of the exact sum).
func selfCheckDecode(dk Decode) (err error) {
	defer recoverAs(&err, "decode kernels "+dk.Name)
	const m, n, ldx = 31, 37, 41 // ldx: stride of S (>= n) and of P
	g := GenericDecode
	for f := range NumFormats {
		d := 45
		if f.Block() > 1 {
			d = 96
		}
		rb := f.RowBytes(d)
		ldc := rb + 3*formatTable[f].unit // cache row stride, bytes
		q := make([]float32, m*d)
		for i := range q {
			q[i] = float32(math.Sin(float64(i)))
		}
		kf := make([]float32, n*d) // the cache as float32
		for i := range kf {
			kf[i] = float32(math.Cos(float64(3 * i)))
		}
		k := Bytes(make([]float32, (n*ldc+3)/4)) // aligned for every format
		for j := 0; j < n; j++ {
			row := k[j*ldc : j*ldc+rb]
			if err := f.Quantize(row, kf[j*d:(j+1)*d]); err != nil {
				return err
			}
			if err := f.Dequantize(kf[j*d:(j+1)*d], row); err != nil {
				return err
			}
		}
		e := f.String()
		scores := func(s []float32, lds int, q []float32, m int) { dk.Scores[f](s, lds, q, m, k, ldc, n, d) }
		scoresRef := func(s []float32, lds int, q []float32, m int) { g.Scores[f](s, lds, q, m, k, ldc, n, d) }
		accum := func(o []float32, ldo int, p []float32, ldp, m int) { dk.Accum[f](o, ldo, p, ldp, m, k, ldc, n, d) }
		accumRef := func(o []float32, ldo int, p []float32, ldp, m int) { g.Accum[f](o, ldo, p, ldp, m, k, ldc, n, d) }
		abs := func(x []float32) []float32 {
			y := make([]float32, len(x))
			for i, v := range x {
				y[i] = float32(math.Abs(float64(v)))
			}
			return y
		}
		kAbs := abs(kf)

		// Scores: S and its magnitude Σ|q·k|.
		s1, s2, mag := make([]float32, m*ldx), make([]float32, m*ldx), make([]float32, m*ldx)
		for i := range s1 {
			s1[i], s2[i] = -7, -7
		}
		scores(s1, ldx, q, m)
		scoresRef(s2, ldx, q, m)
		g.Scores[FormatF32](mag, ldx, abs(q), m, Bytes(kAbs), 4*d, n, d)
		if err := decodeNear(dk.Name, "Scores "+e, s1, s2, mag); err != nil {
			return err
		}

		// Accum: O += P·V, P the same shape as S (rows of 37 keys).
		const ldo = 101
		p := make([]float32, m*ldx)
		for i := range p {
			p[i] = float32(math.Sin(float64(5 * i)))
		}
		o1, o2, omag := make([]float32, m*ldo), make([]float32, m*ldo), make([]float32, m*ldo)
		for i := range o1 {
			o1[i] = float32(math.Cos(float64(i)))
			o2[i] = o1[i]
			if i%ldo < d { // columns beyond d must stay untouched: magnitude 0
				omag[i] = float32(math.Abs(float64(o1[i])))
			}
		}
		accum(o1, ldo, p, ldx, m)
		accumRef(o2, ldo, p, ldx, m)
		g.Accum[FormatF32](omag, ldo, abs(p), ldx, m, Bytes(kAbs), 4*d, n, d)
		if err := decodeNear(dk.Name, "Accum "+e, o1, o2, omag); err != nil {
			return err
		}
	}
	if err := selfCheckDecodeBF16(dk); err != nil {
		return err
	}
	if err := selfCheckHeads(dk, 1, 3); err != nil {
		return err
	}
	// Every m of the grouped-query kernel table (decode_asm.go), on the
	// heads of one scores block (16/m).
	for _, m := range []int{2, 4, 8} {
		if err := selfCheckHeads(dk, m, 16/m); err != nil {
			return err
		}
	}
	b := make([]byte, 1000)
	for i := range b {
		b[i] = byte(i * 7)
	}
	if x, y := dk.ReadSum(b), g.ReadSum(b); x != y {
		return fmt.Errorf("decode kernels %s: ReadSum %#x, generic %#x", dk.Name, x, y)
	}
	return nil
}

// decodeNear compares x with the reference y, element by element, within
// 1e-5·mag (mag: the sum of the magnitudes of the terms; where it is 0,
// the element is outside the result and must be untouched: equal).
func decodeNear(set, name string, x, y, mag []float32) error {
	for i := range x {
		if d := math.Abs(float64(x[i] - y[i])); !(d <= 1e-5*float64(mag[i])) {
			return fmt.Errorf("decode kernels %s: %s disagrees with generic at %d: %v vs %v", set, name, i, x[i], y[i])
		}
	}
	return nil
}

// selfCheckHeads compares the multi-head kernels of dk (m = 1 row per
// head) or its grouped-query kernels (m rows per head, the formats that
// have them) with its one-head kernels head by head (they must agree bit
// for bit), on heads heads side by side (the assembly's layout) of 37
// keys, d = 64, for every format.
func selfCheckHeads(dk Decode, m, heads int) error {
	const n, d, lds = 37, 64, 41
	rows := heads * m
	kind := "Heads"
	if m > 1 {
		kind = "Group"
	}
	q := make([]float32, rows*d)
	for i := range q {
		q[i] = float32(math.Sin(float64(7 * i)))
	}
	x := make([]float32, n*heads*d) // the cache as float32: key j, head h at (j·heads+h)·d
	for i := range x {
		x[i] = float32(math.Cos(float64(5 * i)))
	}
	p := make([]float32, rows*lds)
	for i := range p {
		p[i] = float32(math.Sin(float64(3 * i)))
	}
	compare := func(name string, multi, one func(s, o []float32)) error {
		s1, s2 := make([]float32, rows*lds), make([]float32, rows*lds)
		o1, o2 := make([]float32, rows*d), make([]float32, rows*d)
		for i := range o1 {
			o1[i] = float32(i%7) - 3
			o2[i] = o1[i]
		}
		multi(s1, o1)
		one(s2, o2)
		for i := range s1 {
			if math.Float32bits(s1[i]) != math.Float32bits(s2[i]) {
				return fmt.Errorf("decode kernels %s: Scores%s %s disagrees with Scores %s head by head at %d (m = %d): %v vs %v", dk.Name, kind, name, name, i, m, s1[i], s2[i])
			}
		}
		for i := range o1 {
			if math.Float32bits(o1[i]) != math.Float32bits(o2[i]) {
				return fmt.Errorf("decode kernels %s: Accum%s %s disagrees with Accum %s head by head at %d (m = %d): %v vs %v", dk.Name, kind, name, name, i, m, o1[i], o2[i])
			}
		}
		return nil
	}
	// Each format: the multi-head call, and the one-head calls head by head.
	for f := range NumFormats {
		if m > 1 && dk.ScoresGroup[f] == nil {
			continue
		}
		rb := f.RowBytes(d)
		k := Bytes(make([]float32, (n*heads*rb+3)/4))
		for r := 0; r < n*heads; r++ {
			if err := f.Quantize(k[r*rb:(r+1)*rb], x[r*d:(r+1)*d]); err != nil {
				return err
			}
		}
		multi := func(s, o []float32) {
			if m == 1 {
				dk.ScoresHeads[f](s, lds, q, heads, k, heads*rb, rb, n, d)
				dk.AccumHeads[f](o, d, p, lds, heads, k, heads*rb, rb, n, d)
				return
			}
			dk.ScoresGroup[f](s, lds, q, m, heads, k, heads*rb, rb, n, d)
			dk.AccumGroup[f](o, d, p, lds, m, heads, k, heads*rb, rb, n, d)
		}
		one := func(s, o []float32) {
			for h := 0; h < heads; h++ {
				dk.Scores[f](s[h*m*lds:], lds, q[h*m*d:], m, k[h*rb:], heads*rb, n, d)
				dk.Accum[f](o[h*m*d:], d, p[h*m*lds:], lds, m, k[h*rb:], heads*rb, n, d)
			}
		}
		if err := compare(f.String(), multi, one); err != nil {
			return err
		}
	}
	return nil
}

// selfCheckDecodeBF16 compares the bf16 Scores and Accum of dk with
// GenericDecode's on the shapes of the native bfloat16 kernels (set
// "avx512bf16": tiles of 16, 8 and 4 rows, d a multiple of 32), which the shapes of
// selfCheckDecode do not reach: 28 rows (16+8+4), 37 keys, d = 64, Q and P
// bfloat16 values (the native kernels round them; the check holds for
// every set), within decodeNear's tolerance.
func selfCheckDecodeBF16(dk Decode) (err error) {
	defer recoverAs(&err, "decode kernels "+dk.Name)
	const m, n, d, ld = 28, 37, 64, 41 // ld: stride of S and P (>= n)
	const f = FormatBF16
	g := GenericDecode
	bf := func(x float64) float32 { return BF16ToF32(F32ToBF16(float32(x))) }
	q, p := make([]float32, m*d), make([]float32, m*ld)
	for i := range q {
		q[i] = bf(math.Sin(float64(i)))
	}
	for i := range p {
		p[i] = bf(math.Sin(float64(5 * i)))
	}
	ldc := 2*d + 6 // cache row stride, bytes
	kf := make([]float32, n*d)
	k := make([]byte, n*ldc)
	for j := 0; j < n; j++ {
		for c := 0; c < d; c++ {
			kf[j*d+c] = bf(math.Cos(float64(3 * (j*d + c))))
		}
		if err := f.Quantize(k[j*ldc:j*ldc+2*d], kf[j*d:(j+1)*d]); err != nil {
			return err
		}
	}
	abs := func(x []float32) []float32 {
		y := make([]float32, len(x))
		for i, v := range x {
			y[i] = float32(math.Abs(float64(v)))
		}
		return y
	}
	s1, s2, mag := make([]float32, m*ld), make([]float32, m*ld), make([]float32, m*ld)
	dk.Scores[f](s1, ld, q, m, k, ldc, n, d)
	g.Scores[f](s2, ld, q, m, k, ldc, n, d)
	g.Scores[FormatF32](mag, ld, abs(q), m, Bytes(abs(kf)), 4*d, n, d)
	if err := decodeNear(dk.Name, "Scores bf16 (d = 64)", s1, s2, mag); err != nil {
		return err
	}
	o1, o2, omag := make([]float32, m*d), make([]float32, m*d), make([]float32, m*d)
	for i := range o1 {
		o1[i] = float32(math.Cos(float64(i)))
		o2[i], omag[i] = o1[i], float32(math.Abs(float64(o1[i])))
	}
	dk.Accum[f](o1, d, p, ld, m, k, ldc, n, d)
	g.Accum[f](o2, d, p, ld, m, k, ldc, n, d)
	g.Accum[FormatF32](omag, d, abs(p), ld, m, Bytes(abs(kf)), 4*d, n, d)
	return decodeNear(dk.Name, "Accum bf16 (d = 64)", o1, o2, omag)
}
