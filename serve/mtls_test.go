package serve_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/serve"
)

// testCA is a certificate authority in memory.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue makes a certificate for name: a server's for 127.0.0.1, or a
// client's.
func (ca *testCA) issue(t *testing.T, name string, server bool) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// Mutual TLS: a client certificate the service's authority signed admits
// its client (named by its Common Name, with the predict scope unless the
// clients file says more); one from another authority fails the
// handshake; without a certificate a token is still needed.
func TestServiceClientCertificates(t *testing.T) {
	dir := t.TempDir()
	data, models := fixture(t, dir, true)
	d, err := serve.Deploy(context.Background(), serve.DeployConfig{Models: models, Data: data, Timeout: answerWait, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ca, other := newTestCA(t), newTestCA(t)
	var clients serve.Clients
	tok, _ := clients.Issue("crm", serve.IssueOptions{})
	// A clients file entry of a certificate's name gives it its scopes.
	if _, err := clients.Issue("ops", serve.IssueOptions{Scopes: []string{serve.ScopePredict, serve.ScopeMetrics}}); err != nil {
		t.Fatal(err)
	}
	auth, err := serve.NewAuth(serve.AuthConfig{Clients: &clients, Certificates: true})
	if err != nil {
		t.Fatal(err)
	}
	var logBuf bytes.Buffer
	access, _ := serve.NewAccessLog(&logBuf, nil, make([]byte, 32))
	svc := serve.NewService(serve.ServiceConfig{Scorer: d.Scorer, Labels: d.Set.Aggregator.Labels, Auth: auth, Access: access})
	srv := httptest.NewUnstartedServer(svc.Handler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.issue(t, "server", true)}, ClientCAs: ca.pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()
	do := func(cert *tls.Certificate, method, path, authz string) (int, string, error) {
		cfg := &tls.Config{RootCAs: ca.pool}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
		defer c.CloseIdleConnections()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(`{"ids": [4]}`))
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	billing, ops, stranger := ca.issue(t, "billing", false), ca.issue(t, "ops", false), other.issue(t, "billing", false)
	for _, c := range []struct {
		name         string
		cert         *tls.Certificate
		method, path string
		authz        string
		code         int
	}{
		{"certificate", &billing, "POST", "/v1/predict", "", 200},
		{"certificate on metrics", &billing, "GET", "/metrics", "", 403},
		{"listed certificate on metrics", &ops, "GET", "/metrics", "", 200},
		{"no certificate, no token", nil, "POST", "/v1/predict", "", 401},
		{"no certificate, a token", nil, "POST", "/v1/predict", "Bearer " + tok, 200},
	} {
		code, body, err := do(c.cert, c.method, c.path, c.authz)
		if err != nil || code != c.code {
			t.Errorf("%s: %d %s (%v), want %d", c.name, code, body, err, c.code)
		}
	}
	if code, _, err := do(&stranger, "POST", "/v1/predict", ""); err == nil {
		t.Errorf("a certificate of another authority: %d, want a failed handshake", code)
	}
	access.Close()
	if !strings.Contains(logBuf.String(), `"client":"billing","remote"`) || !strings.Contains(logBuf.String(), `"client":"ops"`) {
		t.Errorf("the access log does not name the certificates' clients:\n%s", logBuf.String())
	}
}
