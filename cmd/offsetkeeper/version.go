package main

import (
	"runtime/debug"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=..."; left
// at "dev", buildVersion takes it from the build info instead.
var version = "dev"

func init() { version = buildVersion(version, debug.ReadBuildInfo) }

// buildVersion is set, when set with -ldflags; else the module's version
// when installed with `go install …@v1.2.3` (or a pseudo-version of the
// commit); else "dev", with the commit and "-dirty" a build from a
// checkout records.
func buildVersion(set string, read func() (*debug.BuildInfo, bool)) string {
	if set != "dev" {
		return set
	}
	bi, ok := read()
	if !ok {
		return set
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" && !strings.HasSuffix(v, "+dirty") {
		return v
	}
	var rev string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return set
	}
	out := set + " (" + rev[:min(12, len(rev))]
	if dirty {
		out += "-dirty"
	}
	return out + ")"
}
