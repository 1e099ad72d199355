//go:build race

package fence

// raceBuild says the test binary runs under the race detector.
const raceBuild = true
