package cli

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is the release this binary was built as: the Makefile sets it
// (-ldflags "-X main.version=..." from git describe). Without it, the
// module's version from the build info, or "devel".
var version string

// versionText is what asyrevel --version prints: the version, then the
// commit and its time when the build recorded them (go build in a git
// checkout does), whether the tree had changes, the Go release and the
// platform.
func versionText() string {
	v := version
	var commit, when, dirty string
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = ", with uncommitted changes"
				}
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	built := ""
	if commit != "" {
		built = fmt.Sprintf("commit %.12s", commit)
		if when != "" {
			built += " of " + when
		}
		built += dirty + "; "
	}
	return fmt.Sprintf("asyrevel %s (%s%s, %s/%s)", v, built, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func cmdVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "asyrevel version (or asyrevel --version)\n\n"+
		"Prints the release this binary was built as (make build stamps git describe into\n"+
		"it), the commit and its time when the build recorded them, the Go release and the\n"+
		"platform.", stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: version takes no argument", errUsage)
	}
	fmt.Fprintln(stdout, versionText())
	return nil
}
