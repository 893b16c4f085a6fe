//go:build !race

package boltchecktest

// raceEnabled: see race_on.go.
const raceEnabled = false
