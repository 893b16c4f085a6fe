//go:build race

package boltchecktest

// raceEnabled: the race detector reserves terabytes of shadow memory, which RLIMIT_DATA counts, so
// a child under it watches its resident memory instead (see Child).
const raceEnabled = true
