//go:build race

package flashattn

// raceEnabled: the race detector makes sync.Pool drop items on purpose,
// so allocation counts are only checked without it.
const raceEnabled = true
