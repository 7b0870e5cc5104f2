//go:build race

package gpu

// raceEnabled: under the race detector the PTX interpreter is slow, so the
// simulated attention tests run a reduced set of cases.
const raceEnabled = true
