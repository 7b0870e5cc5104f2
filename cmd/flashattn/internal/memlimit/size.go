// Package memlimit decides whether a run fits in memory before it allocates:
// it reads how much memory this machine (and the cgroup the process runs in)
// has available, parses limits given on the command line such as "512M" or
// "4G", and adds and multiplies sizes without ever overflowing.
package memlimit

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// Size is a number of bytes. Arithmetic on sizes saturates at Inf instead
// of wrapping, so a product of untrusted dimensions that does not fit in 64
// bits compares as larger than any real limit.
type Size uint64

// Inf is the saturated size: more than any machine has.
const Inf = Size(math.MaxUint64)

// Add returns the saturating sum of the sizes.
func Add(xs ...Size) Size {
	var s Size
	for _, x := range xs {
		sum, carry := bits.Add64(uint64(s), uint64(x), 0)
		if carry != 0 {
			return Inf
		}
		s = Size(sum)
	}
	return s
}

// Mul returns the saturating product of the factors. A negative factor
// gives Inf (it can only come from a bug or an overflow upstream); a zero
// factor gives 0 even when other factors are huge.
func Mul(factors ...int) Size {
	if slices.Contains(factors, 0) {
		return 0
	}
	p := Size(1)
	for _, f := range factors {
		p = p.Times(f) // with no zero factor, Inf stays Inf
	}
	return p
}

// Times returns the saturating product s·n (n < 0 gives Inf).
func (s Size) Times(n int) Size {
	if n < 0 {
		return Inf
	}
	hi, lo := bits.Mul64(uint64(s), uint64(n))
	if hi != 0 {
		return Inf
	}
	return Size(lo)
}

// String formats s with a binary unit: "512 B", "1.5 KiB", "3.2 GiB",
// "4.0 TiB"; Inf is "more than 16 EiB".
func (s Size) String() string {
	if s == Inf {
		return "more than 16 EiB"
	}
	const units = "KMGTPE"
	if s < 1024 {
		return fmt.Sprintf("%d B", uint64(s))
	}
	v, u := float64(s)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[u])
}

// ParseSize parses a size such as "512M", "4G", "1.5GiB", "100k" or
// "1048576" (bytes). The units K, M, G, T, P are powers of 1024, in either
// case, optionally followed by "B" or "iB". The size must be positive and
// below 16 EiB.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	num := strings.TrimRightFunc(t, func(r rune) bool { return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' })
	unit := strings.ToUpper(t[len(num):])
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I")
	num = strings.TrimSpace(num)
	shift := 0
	switch unit {
	case "":
		if u := strings.ToUpper(t[len(num):]); u != "" && u != "B" {
			return 0, fmt.Errorf("size %q: unknown unit (want K, M, G, T or P)", s)
		}
	case "K":
		shift = 10
	case "M":
		shift = 20
	case "G":
		shift = 30
	case "T":
		shift = 40
	case "P":
		shift = 50
	default:
		return 0, fmt.Errorf("size %q: unknown unit (want K, M, G, T or P)", s)
	}
	if num == "" {
		return 0, fmt.Errorf("size %q: no number", s)
	}
	if n, err := strconv.ParseUint(num, 10, 64); err == nil {
		if n == 0 {
			return 0, fmt.Errorf("size %q: must be positive", s)
		}
		if n > uint64(Inf)>>shift {
			return 0, fmt.Errorf("size %q: too large", s)
		}
		return Size(n << shift), nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || strings.ContainsAny(num, "xXpP_") {
		return 0, fmt.Errorf("size %q: not a number", s)
	}
	v := f * float64(uint64(1)<<shift)
	switch {
	case !(v >= 1):
		return 0, fmt.Errorf("size %q: must be at least 1 byte", s)
	case v >= 1<<64:
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return Size(v), nil
}
