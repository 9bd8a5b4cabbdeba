package harness

import (
	"os"
	"testing"
)

// skipUnlessCI skips t for err, something its tests need that the machine
// lacks, except in CI (CI set in the environment), where it fails t: there
// they must run. name prefixes the message, as the component's other
// failures do; tests names the tests in it. A nil err does nothing.
func skipUnlessCI(t testing.TB, err error, name, tests string) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s: %v; CI is set, so the %s tests must not be skipped", name, err, tests)
	}
	t.Skipf("%s: %v; skipping (in CI this fails)", name, err)
}
