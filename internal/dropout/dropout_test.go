package dropout

import (
	"math"
	"testing"
)

func TestPhiloxKnownAnswers(t *testing.T) {
	cases := []struct {
		ctr  [4]uint32
		key  [2]uint32
		want [4]uint32
	}{
		{[4]uint32{}, [2]uint32{}, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, [2]uint32{0xffffffff, 0xffffffff},
			[4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{[4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, [2]uint32{0xa4093822, 0x299f31d0},
			[4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	}
	for _, c := range cases {
		if got := Philox4x32(c.ctr, c.key); got != c.want {
			t.Errorf("Philox4x32(%#x, %#x) = %#x, want %#x", c.ctr, c.key, got, c.want)
		}
	}
}

func TestKeepMatchesDefinition(t *testing.T) {
	var seed uint64 = 0x0123456789abcdef
	m := NewMask(seed, 0.3)
	th := uint32(float64(float32(0.3)) * (1 << 32))
	for b := 0; b < 2; b++ {
		for h := 0; h < 3; h++ {
			for i := 0; i < 5; i++ {
				for j := 0; j < 11; j++ {
					out := Philox4x32([4]uint32{uint32(j >> 2), uint32(i), uint32(h), uint32(b)},
						[2]uint32{uint32(seed), uint32(seed >> 32)})
					want := out[j&3] >= th
					if got := m.Keep(b, h, i, j); got != want {
						t.Fatalf("Keep(%d,%d,%d,%d) = %v, want %v", b, h, i, j, got, want)
					}
				}
			}
		}
	}
}

func TestApplyRowMatchesKeep(t *testing.T) {
	m := NewMask(42, 0.5)
	s := m.Scale()
	if s != 2 {
		t.Fatalf("Scale = %v, want 2", s)
	}
	for j0 := 0; j0 < 9; j0++ {
		for n := 0; n < 14; n++ {
			row := make([]float32, n)
			for t := range row {
				row[t] = float32(t + 1)
			}
			m.ApplyRow(row, 1, 2, 3, j0)
			for tt := 0; tt < n; tt++ {
				want := float32(0)
				if m.Keep(1, 2, 3, j0+tt) {
					want = float32(tt+1) * s
				}
				if row[tt] != want {
					t.Fatalf("j0=%d n=%d: row[%d] = %v, want %v", j0, n, tt, row[tt], want)
				}
			}
		}
	}
}

func TestApplyRowNoAlloc(t *testing.T) {
	m := NewMask(7, 0.2)
	row := make([]float32, 37)
	allocs := testing.AllocsPerRun(100, func() { m.ApplyRow(row, 0, 1, 2, 3) })
	if allocs != 0 {
		t.Fatalf("ApplyRow allocates %v times", allocs)
	}
}

func TestKeptFraction(t *testing.T) {
	const n = 1000000
	for _, p := range []float32{0.1, 0.5, 0.9} {
		m := NewMask(uint64(p*1000)+12345, p)
		kept := 0
		for k := 0; k < n; k++ {
			// Spread samples over all four counter words.
			b, h, i, j := k%3, (k/3)%5, (k/15)%97, k/1455
			if m.Keep(b, h, i, j) {
				kept++
			}
		}
		q := 1 - float64(p)
		sigma := math.Sqrt(n * q * (1 - q))
		if d := math.Abs(float64(kept) - n*q); d > 4*sigma {
			t.Errorf("p=%v: kept %d of %d, want %.0f ± %.0f", p, kept, n, n*q, 4*sigma)
		}
		if math.Abs(float64(m.Scale())-1/q) > 1e-6/q {
			t.Errorf("p=%v: Scale = %v, want %v", p, m.Scale(), 1/q)
		}
		if m.P() != p {
			t.Errorf("P() = %v, want %v", m.P(), p)
		}
	}
}

func TestZeroProbabilityKeepsAll(t *testing.T) {
	for _, m := range []Mask{NewMask(99, 0), {}} {
		if m.Scale() != 1 {
			t.Fatalf("Scale = %v, want 1", m.Scale())
		}
		for j := 0; j < 1000; j++ {
			if !m.Keep(0, 1, 2, j) {
				t.Fatalf("p=0 dropped column %d", j)
			}
		}
		row := []float32{1, 2, 3, 4, 5}
		m.ApplyRow(row, 0, 0, 0, 1)
		for k, v := range row {
			if v != float32(k+1) {
				t.Fatalf("p=0 changed row: %v", row)
			}
		}
	}
}

func TestNewMaskPanics(t *testing.T) {
	for _, p := range []float32{-0.1, 1, float32(math.NaN())} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewMask(p=%v) did not panic", p)
				}
			}()
			NewMask(0, p)
		}()
	}
}

func TestThresholdSaturates(t *testing.T) {
	m := NewMask(0, math.Nextafter32(1, 0))
	if m.Threshold() != uint32(float64(math.Nextafter32(1, 0))*(1<<32)) {
		t.Fatalf("threshold %#x", m.Threshold())
	}
}

func BenchmarkApplyRow(b *testing.B) {
	m := NewMask(1, 0.1)
	row := make([]float32, 256)
	b.SetBytes(int64(4 * len(row)))
	for b.Loop() {
		m.ApplyRow(row, 0, 0, 0, 0)
	}
}
