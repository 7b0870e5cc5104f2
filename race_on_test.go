//go:build race

package flashattn

// raceEnabled: under the race detector escape analysis changes and calls
// allocate, so allocation counts are only checked without it.
const raceEnabled = true
