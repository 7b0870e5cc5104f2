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
// (45; q8_0 and q4_0: 96), with padded strides. The tolerance is 1e-5·Σ|terms|
// per element, which two float32 sums of at most 45 terms in any order
// always meet (each is within 45·2⁻²⁴·Σ|terms| of the exact sum).
func selfCheckDecode(dk Decode) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decode kernels %s: %v", dk.Name, r)
		}
	}()
	const m, n, ldx = 31, 37, 41 // ldx: stride of S (>= n) and of P
	g := GenericDecode
	for _, e := range []string{"f32", "bf16", "f16", "q8", "q4"} {
		d := 45
		if e == "q8" || e == "q4" {
			d = 96
		}
		ldc := d + 3 // cache row stride, elements (q8: bytes)
		q := make([]float32, m*d)
		for i := range q {
			q[i] = float32(math.Sin(float64(i)))
		}
		kf := make([]float32, n*d) // the cache as float32
		for i := range kf {
			kf[i] = float32(math.Cos(float64(3 * i)))
		}
		var scores, scoresRef func(s []float32, lds int, q []float32, m int)
		var accum, accumRef func(o []float32, ldo int, p []float32, ldp, m int)
		switch e {
		case "f32":
			k := make([]float32, n*ldc)
			for j := 0; j < n; j++ {
				copy(k[j*ldc:], kf[j*d:(j+1)*d])
			}
			scores = func(s []float32, lds int, q []float32, m int) { dk.ScoresF32(s, lds, q, m, k, ldc, n, d) }
			scoresRef = func(s []float32, lds int, q []float32, m int) { g.ScoresF32(s, lds, q, m, k, ldc, n, d) }
			accum = func(o []float32, ldo int, p []float32, ldp, m int) { dk.AccumF32(o, ldo, p, ldp, m, k, ldc, n, d) }
			accumRef = func(o []float32, ldo int, p []float32, ldp, m int) { g.AccumF32(o, ldo, p, ldp, m, k, ldc, n, d) }
		case "bf16", "f16":
			el, sk, sr, ak, ar := BF16, dk.ScoresBF16, g.ScoresBF16, dk.AccumBF16, g.AccumBF16
			if e == "f16" {
				el, sk, sr, ak, ar = F16, dk.ScoresF16, g.ScoresF16, dk.AccumF16, g.AccumF16
			}
			k := make([]uint16, n*ldc)
			for j := 0; j < n; j++ {
				for p := 0; p < d; p++ {
					k[j*ldc+p] = el.FromF32(kf[j*d+p])
					kf[j*d+p] = el.ToF32(k[j*ldc+p])
				}
			}
			scores = func(s []float32, lds int, q []float32, m int) { sk(s, lds, q, m, k, ldc, n, d) }
			scoresRef = func(s []float32, lds int, q []float32, m int) { sr(s, lds, q, m, k, ldc, n, d) }
			accum = func(o []float32, ldo int, p []float32, ldp, m int) { ak(o, ldo, p, ldp, m, k, ldc, n, d) }
			accumRef = func(o []float32, ldo int, p []float32, ldp, m int) { ar(o, ldo, p, ldp, m, k, ldc, n, d) }
		case "q8", "q4":
			rowBytes, quantize, dequantize := Q8RowBytes, QuantizeQ8, DequantizeQ8
			sk, sr, ak, ar := dk.ScoresQ8, g.ScoresQ8, dk.AccumQ8, g.AccumQ8
			if e == "q4" {
				rowBytes, quantize, dequantize = Q4RowBytes, QuantizeQ4, DequantizeQ4
				sk, sr, ak, ar = dk.ScoresQ4, g.ScoresQ4, dk.AccumQ4, g.AccumQ4
			}
			ldc = rowBytes(d) + 5
			k := make([]byte, n*ldc)
			for j := 0; j < n; j++ {
				row := k[j*ldc : j*ldc+rowBytes(d)]
				if err := quantize(row, kf[j*d:(j+1)*d]); err != nil {
					return err
				}
				if err := dequantize(kf[j*d:(j+1)*d], row); err != nil {
					return err
				}
			}
			scores = func(s []float32, lds int, q []float32, m int) { sk(s, lds, q, m, k, ldc, n, d) }
			scoresRef = func(s []float32, lds int, q []float32, m int) { sr(s, lds, q, m, k, ldc, n, d) }
			accum = func(o []float32, ldo int, p []float32, ldp, m int) { ak(o, ldo, p, ldp, m, k, ldc, n, d) }
			accumRef = func(o []float32, ldo int, p []float32, ldp, m int) { ar(o, ldo, p, ldp, m, k, ldc, n, d) }
		}
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
		g.ScoresF32(mag, ldx, abs(q), m, kAbs, d, n, d)
		if err := decodeNear(dk.Name, "Scores"+e, s1, s2, mag); err != nil {
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
		g.AccumF32(omag, ldo, abs(p), ldx, m, kAbs, d, n, d)
		if err := decodeNear(dk.Name, "Accum"+e, o1, o2, omag); err != nil {
			return err
		}
	}
	if err := selfCheckHeads(dk); err != nil {
		return err
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

// selfCheckHeads compares the multi-head kernels of dk with its one-head
// kernels head by head (they must agree bit for bit), on 3 heads side by
// side (the multi-head assembly's layout) of 37 keys, d = 64, for every
// type.
func selfCheckHeads(dk Decode) error {
	const heads, n, d, lds = 3, 37, 64, 41
	q := make([]float32, heads*d)
	for i := range q {
		q[i] = float32(math.Sin(float64(7 * i)))
	}
	x := make([]float32, n*heads*d) // the cache as float32: key j, head h at (j·heads+h)·d
	for i := range x {
		x[i] = float32(math.Cos(float64(5 * i)))
	}
	p := make([]float32, heads*lds)
	for i := range p {
		p[i] = float32(math.Sin(float64(3 * i)))
	}
	compare := func(name string, multi, one func(s, o []float32)) error {
		s1, s2 := make([]float32, heads*lds), make([]float32, heads*lds)
		o1, o2 := make([]float32, heads*d), make([]float32, heads*d)
		for i := range o1 {
			o1[i] = float32(i%7) - 3
			o2[i] = o1[i]
		}
		multi(s1, o1)
		one(s2, o2)
		for i := range s1 {
			if math.Float32bits(s1[i]) != math.Float32bits(s2[i]) {
				return fmt.Errorf("decode kernels %s: Scores%sHeads disagrees with Scores%s head by head at %d: %v vs %v", dk.Name, name, name, i, s1[i], s2[i])
			}
		}
		for i := range o1 {
			if math.Float32bits(o1[i]) != math.Float32bits(o2[i]) {
				return fmt.Errorf("decode kernels %s: Accum%sHeads disagrees with Accum%s head by head at %d: %v vs %v", dk.Name, name, name, i, o1[i], o2[i])
			}
		}
		return nil
	}
	// Each type: the multi-head call, and the one-head calls head by head.
	hs := d
	f32 := func(s, o []float32) {
		dk.ScoresF32Heads(s, lds, q, heads, x, heads*hs, hs, n, d)
		dk.AccumF32Heads(o, d, p, lds, heads, x, heads*hs, hs, n, d)
	}
	f32one := func(s, o []float32) {
		for h := 0; h < heads; h++ {
			dk.ScoresF32(s[h*lds:], lds, q[h*d:], 1, x[h*hs:], heads*hs, n, d)
			dk.AccumF32(o[h*d:], d, p[h*lds:], lds, 1, x[h*hs:], heads*hs, n, d)
		}
	}
	if err := compare("F32", f32, f32one); err != nil {
		return err
	}
	for _, e := range []Elem{BF16, F16} {
		k := make([]uint16, len(x))
		for i, v := range x {
			k[i] = e.FromF32(v)
		}
		sh, ah, s1, a1, name := dk.ScoresBF16Heads, dk.AccumBF16Heads, dk.ScoresBF16, dk.AccumBF16, "BF16"
		if e == F16 {
			sh, ah, s1, a1, name = dk.ScoresF16Heads, dk.AccumF16Heads, dk.ScoresF16, dk.AccumF16, "F16"
		}
		multi := func(s, o []float32) {
			sh(s, lds, q, heads, k, heads*hs, hs, n, d)
			ah(o, d, p, lds, heads, k, heads*hs, hs, n, d)
		}
		one := func(s, o []float32) {
			for h := 0; h < heads; h++ {
				s1(s[h*lds:], lds, q[h*d:], 1, k[h*hs:], heads*hs, n, d)
				a1(o[h*d:], d, p[h*lds:], lds, 1, k[h*hs:], heads*hs, n, d)
			}
		}
		if err := compare(name, multi, one); err != nil {
			return err
		}
	}
	for _, bits := range []int{8, 4} {
		rowBytes, quantize := Q8RowBytes, QuantizeQ8
		sh, ah, s1, a1, name := dk.ScoresQ8Heads, dk.AccumQ8Heads, dk.ScoresQ8, dk.AccumQ8, "Q8"
		if bits == 4 {
			rowBytes, quantize = Q4RowBytes, QuantizeQ4
			sh, ah, s1, a1, name = dk.ScoresQ4Heads, dk.AccumQ4Heads, dk.ScoresQ4, dk.AccumQ4, "Q4"
		}
		rb := rowBytes(d)
		k := make([]byte, n*heads*rb)
		for r := 0; r < n*heads; r++ {
			if err := quantize(k[r*rb:(r+1)*rb], x[r*d:(r+1)*d]); err != nil {
				return err
			}
		}
		multi := func(s, o []float32) {
			sh(s, lds, q, heads, k, heads*rb, rb, n, d)
			ah(o, d, p, lds, heads, k, heads*rb, rb, n, d)
		}
		one := func(s, o []float32) {
			for h := 0; h < heads; h++ {
				s1(s[h*lds:], lds, q[h*d:], 1, k[h*rb:], heads*rb, n, d)
				a1(o[h*d:], d, p[h*lds:], lds, 1, k[h*rb:], heads*rb, n, d)
			}
		}
		if err := compare(name, multi, one); err != nil {
			return err
		}
	}
	return nil
}
