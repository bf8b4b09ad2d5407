//go:build race

package chaos

// raceEnabled: the test binary runs with the race detector, so the processes
// of TestChaosShort are built with it too (and share its build cache).
const raceEnabled = true
