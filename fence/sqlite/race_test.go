//go:build race

package sqlite

// raceBuild says the test binary runs under the race detector.
const raceBuild = true
