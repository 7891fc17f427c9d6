package serve_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/serve"
)

// clock is a settable clock for the buckets and expiries.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// call sends one request with an Authorization header (none if auth is
// "") and returns the status, the headers and the body.
func call(t *testing.T, method, url, auth, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// The service answers only its clients: without a token, with a forged
// or altered token, another service's token, an expired one, or one
// without the endpoint's scope it refuses with 401 or 403 and a body that
// names the fix; a client over its rate gets 429 with Retry-After; a
// revoked client is refused at once. The access log records who asked for
// which ids, hashed under the access key, and never a token. Before,
// every request was answered.
func TestServiceAuth(t *testing.T) {
	dir := t.TempDir()
	data, models := fixture(t, dir, true)
	ctx := context.Background()
	// Every call is answered: the timeout bounds a hang only (2 s, the
	// default, is not one at load 20).
	d, err := serve.Deploy(ctx, serve.DeployConfig{Models: models, Data: data, Timeout: answerWait, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	clk := &clock{t: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
	var clients, others serve.Clients
	crm, err := clients.Issue("crm", serve.IssueOptions{Now: clk.now(), Valid: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	slow, _ := clients.Issue("slow", serve.IssueOptions{Now: clk.now(), Rate: 1, Burst: 1})
	brief, _ := clients.Issue("brief", serve.IssueOptions{Now: clk.now(), Valid: time.Hour})
	scraper, _ := clients.Issue("prometheus", serve.IssueOptions{Now: clk.now(), Scopes: []string{serve.ScopeMetrics}})
	stranger, _ := others.Issue("crm", serve.IssueOptions{Now: clk.now()})
	if _, err := clients.Issue("crm", serve.IssueOptions{}); err == nil {
		t.Error("a second token for crm without Replace")
	}
	path := filepath.Join(dir, "keys", serve.ClientsFile)
	if err := clients.Write(path); err != nil {
		t.Fatal(err)
	}
	read, err := serve.ReadClients(path)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(read)
	for _, tok := range []string{crm, slow, brief, scraper} {
		if strings.Contains(string(raw), tok) || strings.Contains(string(raw), tok[len(tok)-43:]) {
			t.Fatal("the clients file holds a token")
		}
	}
	auth, err := serve.NewAuth(serve.AuthConfig{Clients: read, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	key, err := serve.MakeAccessKey(filepath.Join(dir, "keys", serve.AccessKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	var logBuf bytes.Buffer
	access, err := serve.NewAccessLog(&logBuf, nil, key)
	if err != nil {
		t.Fatal(err)
	}
	svc := serve.NewService(serve.ServiceConfig{Scorer: d.Scorer, Labels: d.Set.Aggregator.Labels, MaxIDs: 10, Auth: auth, Access: access})
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	predict, metrics := srv.URL+"/v1/predict", srv.URL+"/metrics"
	forged := crm[:len(crm)-43] + strings.Repeat("A", 43) // crm's id, another secret
	altered := crm[:len(crm)-1] + map[bool]string{true: "B", false: "A"}[crm[len(crm)-1] == 'A']
	body := `{"ids": [3, 7]}`
	cases := []struct {
		name, method, url, auth string
		code                    int
		has                     []string
	}{
		{"no token", "POST", predict, "", 401, []string{"has no token", "Authorization: Bearer TOKEN", "asyrevel keys client"}},
		{"not bearer", "POST", predict, "Basic " + crm, 401, []string{"not 'Bearer TOKEN'"}},
		{"garbage", "POST", predict, "Bearer hello", 401, []string{"not one this service issued"}},
		{"forged secret", "POST", predict, "Bearer " + forged, 401, []string{"not one this service issued"}},
		{"altered", "POST", predict, "Bearer " + altered, 401, []string{"not one this service issued"}},
		{"another service's", "POST", predict, "Bearer " + stranger, 401, []string{"not one this service issued"}},
		{"metrics token on predict", "POST", predict, "Bearer " + scraper, 403, []string{"token is for metrics, not predict", "--scope metrics,predict"}},
		{"predict token on metrics", "GET", metrics, "Bearer " + crm, 403, []string{"token is for predict, not metrics"}},
		{"no token on metrics", "GET", metrics, "", 401, []string{"has no token"}},
		{"client", "POST", predict, "Bearer " + crm, 200, []string{`"predictions"`}},
		{"lower-case scheme", "POST", predict, "bearer " + crm, 200, []string{`"predictions"`}},
		{"scraper", "GET", metrics, "Bearer " + scraper, 200, []string{"asyrevel_serve_requests_total"}},
		{"healthz is open", "GET", srv.URL + "/healthz", "", 200, []string{`"auth":"client tokens"`}},
	}
	for _, c := range cases {
		code, hdr, got := call(t, c.method, c.url, c.auth, body)
		if code != c.code {
			t.Errorf("%s: %d %s, want %d", c.name, code, got, c.code)
			continue
		}
		for _, h := range c.has {
			if !strings.Contains(got, h) {
				t.Errorf("%s: %s lacks %q", c.name, got, h)
			}
		}
		if code == 401 && hdr.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", c.name)
		}
		if code == 401 || code == 403 {
			var r struct{ Error, Fix string }
			if json.Unmarshal([]byte(got), &r) != nil || r.Error == "" || r.Fix == "" {
				t.Errorf("%s: the body %s does not say what is wrong and the fix", c.name, got)
			}
		}
	}
	// Over the rate: slow may ask 1 id a second, in bursts of 10 (the
	// service's largest request); the clock stands still.
	ok, limited := 0, 0
	for range 12 {
		code, hdr, got := call(t, "POST", predict, "Bearer "+slow, `{"ids": ["5"]}`)
		switch code {
		case 200:
			ok++
		case 429:
			limited++
			if hdr.Get("Retry-After") != "1" || !strings.Contains(got, "client slow may ask for 1 ids a second") || !strings.Contains(got, "--rate") {
				t.Errorf("429: Retry-After %q, %s", hdr.Get("Retry-After"), got)
			}
		default:
			t.Errorf("slow: %d %s", code, got)
		}
	}
	if ok != 10 || limited != 2 {
		t.Errorf("slow: %d answered, %d limited; want 10 and 2", ok, limited)
	}
	// A request of more ids than the bucket holds waits for all of them.
	clk.add(3 * time.Second)
	code, hdr, _ := call(t, "POST", predict, "Bearer "+slow, `{"ids": [1,2,3,4,5]}`)
	if code != 429 || hdr.Get("Retry-After") != "2" {
		t.Errorf("5 ids with 3 in the bucket: %d, Retry-After %q; want 429 and 2", code, hdr.Get("Retry-After"))
	}
	clk.add(2 * time.Second)
	if code, _, got := call(t, "POST", predict, "Bearer "+slow, `{"ids": [1,2,3,4,5]}`); code != 200 {
		t.Errorf("after Retry-After: %d %s", code, got)
	}
	// crm is not slowed by slow.
	if code, _, got := call(t, "POST", predict, "Bearer "+crm, body); code != 200 {
		t.Errorf("crm after slow's limit: %d %s", code, got)
	}
	// Expiry.
	clk.add(2 * time.Hour)
	if code, _, got := call(t, "POST", predict, "Bearer "+brief, body); code != 401 || !strings.Contains(got, "client brief's token expired at 2026-11-28T13:00:00Z") || !strings.Contains(got, "--name brief") {
		t.Errorf("expired: %d %s", code, got)
	}
	if exp := auth.Expiring(0); len(exp) != 1 || exp[0].Name != "brief" {
		t.Errorf("Expiring: %v", exp)
	}
	// Revoked (a new clients file read).
	clients.Revoke("crm")
	if err := auth.Reload(&clients); err != nil {
		t.Fatal(err)
	}
	if code, _, got := call(t, "POST", predict, "Bearer "+crm, body); code != 401 {
		t.Errorf("revoked: %d %s", code, got)
	}
	if err := access.Close(); err != nil {
		t.Fatal(err)
	}

	// The access log: who asked for which ids, hashed; refusals with
	// their reason; never a token.
	log := logBuf.String()
	for _, tok := range []string{crm, slow, brief, scraper, stranger, forged} {
		if strings.Contains(log, tok) || strings.Contains(log, tok[len(tok)-43:]) {
			t.Fatalf("the access log holds a token")
		}
	}
	var entries []serve.AccessEntry
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e serve.AccessEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("access log line %q: %v", sc.Text(), err)
		}
		entries = append(entries, e)
	}
	if n := len(cases) - 1 + 12 + 5; len(entries) != n { // /healthz is not logged
		t.Errorf("%d access log lines, want %d", len(entries), n)
	}
	want3, want7 := serve.HashID(key, "3"), serve.HashID(key, "7")
	found := map[string]int{}
	for _, e := range entries {
		found[e.Client+" "+e.Reason+" "+http.StatusText(e.Status)]++
		if e.Client == "crm" && e.Status == 200 && (len(e.IDHashes) != 2 || e.IDHashes[0] != want3 || e.IDHashes[1] != want7 || e.IDs != 2) {
			t.Errorf("crm's request logged as %+v, want ids 3 and 7 as %s and %s", e, want3, want7)
		}
		if strings.Contains(strings.Join(e.IDHashes, ","), `"3"`) {
			t.Error("a plain id in the log")
		}
	}
	for _, k := range []string{"- no_token Unauthorized", "- bad_token Unauthorized", "prometheus scope Forbidden", "crm scope Forbidden",
		"crm  OK", "slow rate Too Many Requests", "brief expired Unauthorized", "prometheus  OK"} {
		if found[k] == 0 {
			t.Errorf("no access log line %q in %v", k, found)
		}
	}
	if strings.Contains(log, `"3"`) || strings.Contains(log, `"7"`) {
		t.Error("a plain id in the access log")
	}
}

// answerWait is the scoring timeout of tests whose calls are all
// answered: a bound on a hang, not on speed.
const answerWait = 30 * time.Second

// Without clients the service refuses everyone; --insecure-no-auth
// answers everyone and says so in /healthz.
func TestServiceNoClients(t *testing.T) {
	dir := t.TempDir()
	data, models := fixture(t, dir, true)
	d, err := serve.Deploy(context.Background(), serve.DeployConfig{Models: models, Data: data, Net: serve.NetConfig{Bus: "memory"}, Timeout: answerWait, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, insecure := range []bool{false, true} {
		svc := serve.NewService(serve.ServiceConfig{Scorer: d.Scorer, Labels: d.Set.Aggregator.Labels, InsecureNoAuth: insecure})
		srv := httptest.NewServer(svc.Handler())
		code, _, got := call(t, "POST", srv.URL+"/v1/predict", "", `{"ids": [1]}`)
		_, _, health := call(t, "GET", srv.URL+"/healthz", "", "")
		srv.Close()
		switch {
		case !insecure && (code != 401 || !strings.Contains(got, "no clients configured") || !strings.Contains(got, "--clients")):
			t.Errorf("no clients: %d %s", code, got)
		case insecure && (code != 200 || !strings.Contains(health, "OFF (--insecure-no-auth)")):
			t.Errorf("--insecure-no-auth: %d %s; /healthz %s", code, got, health)
		}
	}
}

// The service's default, with the API it had before tokens: a Service
// made without Auth answers nobody. Before, it answered everyone (in the
// issue: 400 requests of 1,000 ids, all 200).
func TestServiceRefusesWithoutCredentials(t *testing.T) {
	dir := t.TempDir()
	data, models := fixture(t, dir, true)
	d, err := serve.Deploy(context.Background(), serve.DeployConfig{Models: models, Data: data, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	srv := httptest.NewServer(serve.NewService(serve.ServiceConfig{Scorer: d.Scorer, Labels: d.Set.Aggregator.Labels}).Handler())
	defer srv.Close()
	for _, path := range []string{"/v1/predict", "/metrics"} {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(`{"ids": [1, 2, 3]}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without credentials: %d %s", path, resp.StatusCode, b)
		}
	}
}

// The access log's lines are JSON whatever the strings: quotes,
// backslashes, control characters and invalid UTF-8 in a field.
func TestAccessLogLines(t *testing.T) {
	var buf bytes.Buffer
	key := make([]byte, 32)
	al, err := serve.NewAccessLog(&buf, nil, key)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 28, 1, 2, 3, 456789000, time.UTC)
	in := serve.AccessEntry{Time: at, Client: "crm", Remote: "a\"b\\c\x00\x1f\xffé✓", Method: "POST", Path: "/v1/predict", Status: 429, Millis: 1.25, Reason: "rate"}
	al.Record(in, []string{"C1", "ü"})
	al.Record(serve.AccessEntry{Time: at, Client: "-", Status: 401}, nil)
	if err := al.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %q", len(lines), buf.String())
	}
	var got serve.AccessEntry
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatalf("%q: %v", lines[0], err)
	}
	want := in
	want.Remote = "a\"b\\c\x00\x1f\ufffdé✓"
	want.IDs, want.IDHashes = 2, []string{serve.HashID(key, "C1"), serve.HashID(key, "ü")}
	if fmt.Sprint(got) != fmt.Sprint(want) || !got.Time.Equal(at) {
		t.Errorf("read back %+v, want %+v", got, want)
	}
	if strings.Contains(lines[1], "ids") || strings.Contains(lines[1], "reason") {
		t.Errorf("empty fields written: %s", lines[1])
	}
}
