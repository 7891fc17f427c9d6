package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// labOnly are what the production binary must not ship: the experiments
// and the rogue client (asyrevel-lab's), the WAN proxy and what it drags in
// (Toxiproxy, gorilla/mux, tomb.v1, the deprecated golang/protobuf).
var labOnly = []string{
	"github.com/asyrevel/asyrevel/experiment",
	"github.com/asyrevel/asyrevel/adversary",
	"github.com/asyrevel/asyrevel/internal/wan",
	"github.com/Shopify/toxiproxy",
	"github.com/gorilla/",
	"gopkg.in/tomb",
	"github.com/golang/protobuf",
}

// deps lists the packages pkg imports, each with its module and version.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}}@{{.Version}}{{end}}", pkg).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
	}
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// labGear returns the lines of deps that are lab gear, or Prometheus's
// client_golang at v1.13 (Toxiproxy's).
func labGear(deps []string) []string {
	var bad []string
	for _, d := range deps {
		pkg, mod, _ := strings.Cut(d, " ")
		for _, l := range labOnly {
			if strings.HasPrefix(pkg, l) {
				bad = append(bad, d)
			}
		}
		if strings.HasPrefix(mod, "github.com/prometheus/client_golang@v1.13.") {
			bad = append(bad, d)
		}
	}
	return bad
}

// The production binary ships what users run: no experiment, no rogue
// client, no WAN proxy and none of its dependencies.
func TestProductionDeps(t *testing.T) {
	if bad := labGear(deps(t, ".")); len(bad) > 0 {
		t.Errorf("asyrevel imports lab gear (it belongs in cmd/asyrevel-lab):\n  %s", strings.Join(bad, "\n  "))
	}
}

// The check finds lab gear where it is: asyrevel-lab imports it (the
// deprecated golang/protobuf came with an old client_golang, which the
// module no longer has at all).
func TestLabDepsFound(t *testing.T) {
	bad := strings.Join(labGear(deps(t, "../asyrevel-lab")), "\n")
	for _, l := range labOnly {
		if l == "github.com/golang/protobuf" {
			continue
		}
		if !strings.Contains(bad, l) {
			t.Errorf("asyrevel-lab's dependencies: %s not found", l)
		}
	}
}

// buildTo builds the main package pkg as dir/name.
func buildTo(t *testing.T, pkg, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if out, err := exec.Command("go", "build", "-o", p, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return p
}

// copyFile copies the executable src to dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	raw, err := os.ReadFile(src)
	if err == nil {
		err = os.WriteFile(dst, raw, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// "asyrevel experiment ..." hands over to asyrevel-lab beside it, else on
// PATH, with the same arguments and its exit status; without it, asyrevel
// exits 2 and says how to get it.
func TestExperimentHandOver(t *testing.T) {
	if testing.Short() {
		t.Skip("short: builds both binaries")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go command: %v", err)
	}
	built := t.TempDir()
	prod := buildTo(t, ".", built, "asyrevel")
	labBin := buildTo(t, "../asyrevel-lab", built, "asyrevel-lab")

	beside, alone, onPath, empty := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	copyFile(t, prod, filepath.Join(beside, "asyrevel"))
	copyFile(t, labBin, filepath.Join(beside, "asyrevel-lab"))
	copyFile(t, prod, filepath.Join(alone, "asyrevel"))
	copyFile(t, labBin, filepath.Join(onPath, "asyrevel-lab"))

	run := func(binary, path string, args ...string) (int, string, string) {
		cmd := exec.Command(binary, args...)
		cmd.Env = append(os.Environ(), "PATH="+path)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("%s %v: %v", binary, args, err)
		}
		return cmd.ProcessState.ExitCode(), o.String(), e.String()
	}
	for _, tc := range []struct {
		name, binary, path string
	}{
		{"beside", filepath.Join(beside, "asyrevel"), empty},
		{"on PATH", filepath.Join(alone, "asyrevel"), onPath},
	} {
		code, out, errOut := run(tc.binary, tc.path, "experiment", "central", "-h")
		if code != 0 || !strings.Contains(errOut, "Usage: asyrevel experiment central") {
			t.Errorf("%s: experiment central -h: exit %d: %s%s", tc.name, code, out, errOut)
		}
		code, out, errOut = run(tc.binary, tc.path, "experiment", "fig")
		if code != 2 || !strings.Contains(errOut, `did you mean "fig3"?`) {
			t.Errorf("%s: experiment fig: exit %d, want asyrevel-lab's 2 and its suggestion: %s%s", tc.name, code, out, errOut)
		}
	}
	code, out, errOut := run(filepath.Join(alone, "asyrevel"), empty, "experiment", "central", "--data", "synthetic")
	if code != 2 || !strings.Contains(errOut, "asyrevel-lab") || !strings.Contains(errOut, "make lab") {
		t.Errorf("without asyrevel-lab: exit %d, want 2 and how to get it: %s%s", code, out, errOut)
	}
}
