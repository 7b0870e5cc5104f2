//go:build !purego

package kernel

// expectedHalfPaths lists the bf16 assembly paths this CPU must offer.
func expectedHalfPaths() []string {
	var names []string
	if hasBF16 {
		names = append(names, "neonbf16", "neonbfmmla")
	}
	return names
}
