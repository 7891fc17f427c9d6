package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyrevel/asyrevel/trust"
)

func TestKeysRoute(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret := filepath.Join(dir, "route.secret")
	if code, out, errOut := runCLI(t, "keys", "route", "--out", secret); code != 0 || !strings.Contains(out, "--route-secret") {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	s, err := trust.ReadRouteSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(t, "keys", "route", "--out", secret); code != 1 || !strings.Contains(out+errOut, "--force") || strings.Contains(out+errOut, s) {
		t.Errorf("over an existing secret: exit %d: %s%s", code, out, errOut)
	}
	keys := filepath.Join(dir, "keys")
	if code, out, errOut := runCLI(t, "keys", "--run", "r", "--parties", "2", "--out", keys, "--route"); code != 0 || !strings.Contains(out, trust.RouteSecretFile) {
		t.Fatalf("keys --route: exit %d: %s%s", code, out, errOut)
	}
	if _, err := trust.ReadRouteSecret(filepath.Join(keys, trust.RouteSecretFile)); err != nil {
		t.Fatal(err)
	}
	// Refused as a whole, before anything is written.
	os.Remove(filepath.Join(keys, "roster.json"))
	if code, _, _ := runCLI(t, "keys", "--run", "r", "--parties", "2", "--out", keys, "--route"); code != 1 {
		t.Errorf("keys --route over an existing secret: exit %d", code)
	}
	if _, err := os.Stat(filepath.Join(keys, "roster.json")); err == nil {
		t.Error("a refused keys --route wrote the roster")
	}
	bad := filepath.Join(dir, "bad.secret")
	os.WriteFile(bad, []byte("short\n"), 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"broker", "--route-secret", secret}, "need --cluster-name"},
		{[]string{"broker", "--route-tls"}, "need --cluster-name"},
		{[]string{"broker", "--store", filepath.Join(dir, "s"), "--cluster-name", "c", "--route-secret", bad}, "at least 16"},
		{[]string{"broker", "--store", filepath.Join(dir, "s"), "--cluster-name", "c", "--route-secret", filepath.Join(dir, "none")}, "no such file"},
		{[]string{"broker", "--store", filepath.Join(dir, "s"), "--cluster-name", "c", "--route-tls"}, "--tls-ca"},
		{[]string{"keys", "route"}, "--out is required"},
	} {
		if code, out, errOut := runCLI(t, c.args...); code != 2 || !strings.Contains(out+errOut, c.want) {
			t.Errorf("%v: exit %d, want 2 and %q: %s%s", c.args, code, c.want, out, errOut)
		}
	}
}
