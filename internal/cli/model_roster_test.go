package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyrevel/asyrevel/serve"
	"github.com/asyrevel/asyrevel/trust"
)

// predict with the keys folder elsewhere: a model re-signed with another
// key (parameters x -5) is refused without --roster and with it, the
// genuine models are scored with --roster, and --trust-unsigned scores the
// re-signed one with a warning on stderr whatever the log level.
func TestPredictModelRosterFlags(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	data := writeRows(t, out)
	trainSmall(t, data, out)
	vault := filepath.Join(t.TempDir(), "keys")
	if err := os.Rename(filepath.Join(out, "keys"), vault); err != nil {
		t.Fatal(err)
	}
	models := filepath.Join(out, "models")
	genuine, err := os.ReadFile(filepath.Join(models, "party-2.model"))
	if err != nil {
		t.Fatal(err)
	}
	predict := func(extra ...string) (int, string, string) {
		return runCLI(t, append([]string{"predict", "--models", models, "--data", data, "--out", filepath.Join(out, "p.csv"), "--log", "error", "--timeout", "2m"}, extra...)...)
	}
	roster := filepath.Join(vault, "roster.json")
	if code, stdout, errOut := predict("--roster", roster); code != 0 || strings.Contains(errOut, "WARNING") {
		t.Fatalf("genuine models with --roster: exit %d: %s %s", code, stdout, errOut)
	}
	f, err := serve.Load(filepath.Join(models, "party-2.model"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range f.Params {
		f.Params[i] *= -5
	}
	k, _ := trust.GenerateKey()
	if err := f.Sign(k); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(models); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := predict(); code == 0 || !strings.Contains(errOut, "--roster FILE") || !strings.Contains(errOut, "--trust-unsigned") {
		t.Errorf("re-signed, no roster: exit %d: %s", code, errOut)
	}
	if code, _, errOut := predict("--roster", roster); code == 0 || !strings.Contains(errOut, "party-2.model is signed by") {
		t.Errorf("re-signed, right roster: exit %d: %s", code, errOut)
	}
	if code, _, errOut := predict("--keys", vault); code == 0 || !strings.Contains(errOut, "party-2.model is signed by") {
		t.Errorf("re-signed, --keys: exit %d: %s", code, errOut)
	}
	code, stdout, errOut := predict("--trust-unsigned")
	if code != 0 || !strings.Contains(errOut, "WARNING: --trust-unsigned") {
		t.Errorf("re-signed, --trust-unsigned: exit %d: %s %s", code, stdout, errOut)
	}
	if err := os.WriteFile(filepath.Join(models, "party-2.model"), genuine, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, stdout, errOut := predict("--roster", roster); code != 0 {
		t.Errorf("genuine model restored, --roster: exit %d: %s %s", code, stdout, errOut)
	}
}

// writeRows writes a small LIBSVM file of 600 rows and 4 features into
// dir: ids are the row numbers.
func writeRows(t *testing.T, dir string) string {
	t.Helper()
	data := filepath.Join(dir, "rows.libsvm")
	var b strings.Builder
	for i := range 600 {
		x1, x2 := float64(i%17)/17, float64(i%5)/5
		y := "-1"
		if x1+x2 > 0.9 {
			y = "+1"
		}
		fmt.Fprintf(&b, "%s 1:%g 2:%g 3:%d 4:%g\n", y, x1, x2, i%3, x1*x2)
	}
	if err := os.WriteFile(data, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return data
}

// trainSmall trains 2 parties on data into out (models and keys).
func trainSmall(t *testing.T, data, out string) {
	t.Helper()
	code, _, errOut := runCLI(t, "train", "--data", data, "--parties", "2", "--steps", "400", "--batch", "8", "--out", out, "--log", "warn")
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut)
	}
}
