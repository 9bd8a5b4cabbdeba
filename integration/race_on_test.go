//go:build race

package integration_test

// raceBuild: the tests run with the race detector, which slows every
// process of theirs several times over.
const raceBuild = true
