package main

import (
	"fmt"
	"slices"
)

// spread summarises repeated measurements: the median and the range.
type spread struct {
	Median, Min, Max float64
}

// summarize returns the median (the mean of the two middle values for an
// even count), minimum and maximum of xs; the zero spread if xs is empty.
func summarize(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}

// format prints the median and the range with the given verb and a
// multiplier: "123.4 (118.0–127.9)".
func (s spread) format(verb string, mult float64, unit string) string {
	f := func(x float64) string { return fmt.Sprintf(verb, x*mult) }
	return f(s.Median) + unit + " (" + f(s.Min) + "–" + f(s.Max) + unit + ")"
}
