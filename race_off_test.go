//go:build !race

package flashattn

const raceEnabled = false
