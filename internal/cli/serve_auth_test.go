package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// asyrevel serve answers only its clients: it does not start without a
// clients file (naming keys client), answers a token that keys client
// issued, refuses a request without one with 401 and the fix, records
// who asked for which ids in the access log (hashed: keys client
// --hash-id finds them), drops a revoked client on SIGHUP, and with
// --insecure-no-auth says so loudly. Before, every request was answered.
func TestServeCommandAuth(t *testing.T) {
	out := t.TempDir()
	data := writeRows(t, out)
	trainSmall(t, data, out)
	models, keys := filepath.Join(out, "models"), filepath.Join(out, "keys")
	code, _, errOut := runCLI(t, "serve", "--models", models, "--data", data, "--listen", "127.0.0.1:0")
	if code == 0 || !strings.Contains(errOut, "asyrevel keys client --name NAME --out "+keys) {
		t.Fatalf("serve without clients: exit %d: %s", code, errOut)
	}
	if code, o, e := runCLI(t, "keys", "client", "--name", "crm", "--out", keys); code != 0 || !strings.Contains(o, "crm.token") {
		t.Fatalf("keys client: exit %d: %s %s", code, o, e)
	}
	if code, _, e := runCLI(t, "keys", "client", "--name", "crm", "--out", keys); code == 0 || !strings.Contains(e, "--force") {
		t.Errorf("a second crm without --force: exit %d: %s", code, e)
	}
	tok, err := os.ReadFile(filepath.Join(keys, "crm.token"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(keys, "crm.token")); fi.Mode().Perm() != 0o600 {
		t.Errorf("the token file has mode %v", fi.Mode().Perm())
	}
	token := strings.TrimSpace(string(tok))
	clients, _ := os.ReadFile(filepath.Join(keys, "clients.json"))
	if strings.Contains(string(clients), token[len(token)-43:]) {
		t.Fatal("clients.json holds the token")
	}

	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	port := freePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	sctx, stop := context.WithCancel(ctx)
	done := goCLI(sctx, "serve", "--models", models, "--data", data, "--listen", "127.0.0.1:"+strconv.Itoa(port), "--log", "warn")
	waitPort(t, port)
	ask := func(auth string) (int, string) {
		req, _ := http.NewRequest("POST", base+"/v1/predict", strings.NewReader(`{"ids": [17, 42]}`))
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := ask(""); code != 401 || !strings.Contains(body, `"fix"`) {
		t.Errorf("no token: %d %s", code, body)
	}
	if code, body := ask(token); code != 200 || !strings.Contains(body, `"id":"42"`) {
		t.Errorf("crm: %d %s", code, body)
	}
	resp, err := http.Get(base + "/healthz")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "client tokens") {
			t.Errorf("/healthz: %s", b)
		}
	}
	// Revoked, then SIGHUP: refused.
	if code, o, e := runCLI(t, "keys", "client", "--revoke", "crm", "--out", keys); code != 0 {
		t.Fatalf("revoke: %s %s", o, e)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(patience)
	for {
		code, _ := ask(token)
		if code == 401 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a revoked client is still answered after SIGHUP: %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	r := <-done
	if r.code != 0 {
		t.Fatalf("serve: exit %d: %s", r.code, r.errOut)
	}
	if !strings.Contains(r.out, "auth: client tokens") || !strings.Contains(r.out, "serve-access.log") {
		t.Errorf("serve's first line: %s", r.out)
	}
	log, err := os.ReadFile(filepath.Join(out, "serve-access.log"))
	if err != nil {
		t.Fatal(err)
	}
	_, h42, e := runCLI(t, "keys", "client", "--hash-id", "42", "--out", keys)
	h42 = strings.TrimSpace(h42)
	if len(h42) != 32 {
		t.Fatalf("--hash-id: %q %s", h42, e)
	}
	var crmLines, refused int
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		var e struct {
			Client   string   `json:"client"`
			Status   int      `json:"status"`
			IDHashes []string `json:"id_hashes"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("access log line %q: %v", line, err)
		}
		if e.Client == "crm" && e.Status == 200 && len(e.IDHashes) == 2 && e.IDHashes[1] == h42 {
			crmLines++
		}
		if e.Status == 401 {
			refused++
		}
	}
	if crmLines < 1 || refused < 2 || strings.Contains(string(log), token[len(token)-43:]) {
		t.Errorf("access log: %d lines of crm asking for 42, %d refusals:\n%s", crmLines, refused, log)
	}

	// --insecure-no-auth: loud, and /healthz says so.
	port = freePort(t)
	base = "http://127.0.0.1:" + strconv.Itoa(port)
	sctx, stop = context.WithCancel(ctx)
	done = goCLI(sctx, "serve", "--models", models, "--data", data, "--listen", "127.0.0.1:"+strconv.Itoa(port), "--insecure-no-auth", "--log", "error")
	waitPort(t, port)
	if code, body := ask(""); code != 200 {
		t.Errorf("--insecure-no-auth: %d %s", code, body)
	}
	resp, err = http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	stop()
	r = <-done
	if !strings.Contains(string(b), "OFF (--insecure-no-auth)") || !strings.Contains(r.errOut, "WARNING: --insecure-no-auth") || !strings.Contains(r.out, "auth: OFF") {
		t.Errorf("--insecure-no-auth is quiet: /healthz %s; stderr %s; stdout %s", b, r.errOut, r.out)
	}
}
