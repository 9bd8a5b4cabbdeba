package main

import (
	"runtime/debug"
	"testing"
)

// --version says what was built: the -ldflags version, else the module's
// version `go install …@v1.2.3` records; a checkout's build says dev.
func TestBuildVersion(t *testing.T) {
	info := func(v string, settings ...string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			bi := &debug.BuildInfo{Main: debug.Module{Version: v}}
			for i := 0; i+1 < len(settings); i += 2 {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
			}
			return bi, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, tc := range []struct {
		name, set string
		read      func() (*debug.BuildInfo, bool)
		want      string
	}{
		{"ldflags", "1.4.0", info("v1.2.3"), "1.4.0"},
		{"go install @v1.2.3", "dev", info("v1.2.3"), "v1.2.3"},
		{"go install @commit", "dev", info("v0.0.0-20261207120000-0123456789ab"), "v0.0.0-20261207120000-0123456789ab"},
		{"a checkout", "dev", info("(devel)", "vcs", "git", "vcs.revision", "0123456789abcdef0123", "vcs.modified", "false"), "dev"},
		{"a checkout, stamped", "dev", info("v1.2.4-0.20261207120000-0123456789ab+dirty", "vcs", "git", "vcs.revision", "0123456789abcdef", "vcs.modified", "true"), "dev"},
		{"no build info", "dev", none, "dev"},
		{"no commit", "dev", info("(devel)"), "dev"},
	} {
		if got := buildVersion(tc.set, tc.read); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
