package main

import (
	"runtime/debug"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=..."; left
// at "dev", buildVersion takes it from the build info instead.
var version = "dev"

func init() { version = buildVersion(version, debug.ReadBuildInfo) }

// buildVersion is set, when set with -ldflags; else, for a build of the
// module as `go install …@v1.2.3` (or @commit) fetches it, the version
// that build records; else set: a build in a checkout records the commit
// (go version -m), and its pseudo-version would change with every commit
// the docs' examples show.
func buildVersion(set string, read func() (*debug.BuildInfo, bool)) string {
	if set != "dev" {
		return set
	}
	bi, ok := read()
	if !ok {
		return set
	}
	for _, s := range bi.Settings {
		if strings.HasPrefix(s.Key, "vcs") {
			return set // built in a checkout
		}
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	return set
}
