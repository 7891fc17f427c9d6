package adversary

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/serve"
)

// The serve categories: requests to the HTTP service of a finished run's
// models (asyrevel serve) from a client without the right credentials.
// Each category's requests are Sent; those the service refused (401, 403,
// 429, each with a body naming the fix) are Rejected, by the service;
// the rest were answered and count as Accepted.
var serveCategories = []struct{ name, how string }{
	{"serve-no-credentials", "POST /v1/predict and GET /metrics without an Authorization header, and with one that is not a bearer token"},
	{"serve-forged-token", "tokens of the right form: a client's id with another secret, random ids and secrets, a client's token with one character changed"},
	{"serve-expired-token", "the token of a client whose validity has passed"},
	{"serve-other-client-token", "a token another service issued (another clients file), a revoked client's token, and a metrics-only client's token on /v1/predict"},
	{"serve-over-rate", "a client's requests after its bucket is empty (its rate: one id an hour)"},
}

// ServeAttack serves the models of a train --out folder (OUT/models, the
// keys in OUT/keys) for the rows of data, with client tokens and an access
// log, over HTTP on loopback, and sends scale requests of each serve
// category. It returns the categories with their counts. A legitimate
// client's requests are answered (checked: an error if not).
func ServeAttack(ctx context.Context, out, data string, scale int, log zerolog.Logger) ([]*Category, error) {
	scale = max(scale, 1)
	d, err := serve.Deploy(ctx, serve.DeployConfig{Models: filepath.Join(out, "models"), Data: data, Timeout: 5 * time.Second, Log: log})
	if err != nil {
		return nil, fmt.Errorf("serve categories: %w", err)
	}
	defer d.Close()
	now := time.Now()
	var clients, elsewhere serve.Clients
	issue := func(c *serve.Clients, name string, o serve.IssueOptions) string {
		if err == nil {
			var tok string
			tok, err = c.Issue(name, o)
			return tok
		}
		return ""
	}
	good := issue(&clients, "crm", serve.IssueOptions{})
	expired := issue(&clients, "expired", serve.IssueOptions{Now: now.Add(-2 * time.Hour), Valid: time.Hour})
	scraper := issue(&clients, "scraper", serve.IssueOptions{Scopes: []string{serve.ScopeMetrics}})
	slow := issue(&clients, "slow", serve.IssueOptions{Rate: 1.0 / 3600, Burst: 1})
	revoked := issue(&clients, "revoked", serve.IssueOptions{})
	other := issue(&elsewhere, "crm", serve.IssueOptions{})
	if err != nil {
		return nil, err
	}
	clients.Revoke("revoked")
	auth, err := serve.NewAuth(serve.AuthConfig{Clients: &clients})
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "asyrevel-adversary-serve-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	key, err := serve.MakeAccessKey(filepath.Join(dir, serve.AccessKeyFile))
	if err != nil {
		return nil, err
	}
	access, err := serve.OpenAccessLog(filepath.Join(dir, "access.log"), key)
	if err != nil {
		return nil, err
	}
	defer access.Close()
	const maxIDs = 100
	svc := serve.NewService(serve.ServiceConfig{Scorer: d.Scorer, Labels: d.Set.Aggregator.Labels, MaxIDs: maxIDs, Auth: auth, Access: access, Log: log})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()

	ids := d.IDs[:min(len(d.IDs), maxIDs)]
	body := func(i int) string {
		b, _ := json.Marshal(map[string][]string{"ids": {ids[i%len(ids)]}})
		return string(b)
	}
	// send sends one request and returns its status, and whether a refusal
	// named its fix.
	send := func(method, path, authz, payload string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(payload))
		if err != nil {
			return 0, err
		}
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if c := resp.StatusCode; c == 401 || c == 403 || c == 429 {
			var r struct{ Error, Fix string }
			if json.Unmarshal(b, &r) != nil || r.Fix == "" {
				return c, fmt.Errorf("a %d without a fix: %s", c, b)
			}
		}
		return resp.StatusCode, nil
	}
	// The legitimate client is answered, before and after.
	legit := func() error {
		if code, err := send("POST", "/v1/predict", "Bearer "+good, body(0)); err != nil || code != 200 {
			return fmt.Errorf("serve categories: the legitimate client got %d (%v)", code, err)
		}
		return nil
	}
	if err := legit(); err != nil {
		return nil, err
	}
	cats := make([]*Category, len(serveCategories))
	for i, c := range serveCategories {
		cats[i] = &Category{Name: c.name, how: c.how}
	}
	attempt := func(c *Category, method, path, authz, payload string) error {
		code, err := send(method, path, authz, payload)
		if err != nil {
			return err
		}
		c.Sent++
		if code == 401 || code == 403 || code == 429 {
			c.Rejected++
		}
		return nil
	}
	random := func(n int) string {
		b := make([]byte, n)
		rand.Read(b)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	goodID := strings.Split(good, ".")[1]
	for i := range scale {
		// No credentials, a non-bearer scheme, a token without its scheme.
		noCred := []string{"", "Basic " + random(12), good}[i%3]
		forged := []string{
			serve.TokenPrefix + "." + goodID + "." + random(32),
			serve.TokenPrefix + "." + fmt.Sprintf("%016x", i) + "." + random(32),
			good[:len(good)-1] + string("AB"[i%2]),
		}[i%3]
		if forged == good {
			forged = good[:len(good)-1] + "C"
		}
		for _, a := range []struct {
			c                   *Category
			method, path, authz string
		}{
			{cats[0], []string{"POST", "GET"}[i%2], []string{"/v1/predict", "/metrics"}[i%2], noCred},
			{cats[1], "POST", "/v1/predict", "Bearer " + forged},
			{cats[2], "POST", "/v1/predict", "Bearer " + expired},
			{cats[3], "POST", "/v1/predict", "Bearer " + []string{other, revoked, scraper}[i%3]},
		} {
			if err := attempt(a.c, a.method, a.path, a.authz, body(i)); err != nil {
				return nil, fmt.Errorf("serve categories: %w", err)
			}
		}
	}
	// Over the rate: slow's bucket holds maxIDs ids (the service's
	// largest request) and refills one an hour: spend it, then ask.
	if code, err := send("POST", "/v1/predict", "Bearer "+slow, fmt.Sprintf(`{"ids": %s}`, mustJSON(ids))); err != nil || code != 200 {
		return nil, fmt.Errorf("serve categories: the slow client's first %d ids got %d (%v)", len(ids), code, err)
	}
	for i := range scale {
		if err := attempt(cats[4], "POST", "/v1/predict", "Bearer "+slow, body(i)); err != nil {
			return nil, fmt.Errorf("serve categories: %w", err)
		}
	}
	if err := legit(); err != nil {
		return nil, err
	}
	if err := access.Close(); err != nil {
		return nil, err
	}
	if err := checkAccessLog(filepath.Join(dir, "access.log"), []string{good, expired, scraper, slow, revoked, other}); err != nil {
		return nil, fmt.Errorf("serve categories: %w", err)
	}
	return cats, nil
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// checkAccessLog checks that the access log names no token.
func checkAccessLog(path string, tokens []string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, t := range tokens {
		if strings.Contains(string(b), t[strings.LastIndexByte(t, '.')+1:]) {
			return fmt.Errorf("the access log holds a token's secret")
		}
	}
	if len(b) == 0 {
		return fmt.Errorf("the access log is empty")
	}
	return nil
}
