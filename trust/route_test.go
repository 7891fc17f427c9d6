package trust

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/internal/freeport"
)

func TestRouteSecretFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, RouteSecretFile)
	if err := WriteRouteSecret(path, false); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", st.Mode(), err)
	}
	s, err := ReadRouteSecret(path)
	if err != nil || len(s) != 43 {
		t.Fatalf("read %q, %v", s, err)
	}
	if err := WriteRouteSecret(path, false); !errors.Is(err, os.ErrExist) {
		t.Errorf("no --force over an existing secret: %v", err)
	}
	if err := WriteRouteSecret(path, true); err != nil {
		t.Fatal(err)
	}
	if s2, _ := ReadRouteSecret(path); s2 == s {
		t.Error("a new secret is the old one")
	}
	for _, c := range []struct{ name, content, want string }{
		{"short", "abc\n", "at least 16"},
		{"empty", "", "at least 16"},
		{"bad chars", "0123456789abcdef:ghij\n", "URL-safe"},
		{"space inside", "0123456789abcdef 0123456789abcdef", "URL-safe"},
		{"huge", strings.Repeat("a", 5000), "not a route secret"},
	} {
		p := filepath.Join(dir, c.name)
		os.WriteFile(p, []byte(c.content), 0o600)
		if _, err := ReadRouteSecret(p); !errors.Is(err, ErrRouteSecret) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := ReadRouteSecret(filepath.Join(dir, "missing")); !errors.Is(err, ErrRouteSecret) {
		t.Errorf("missing: %v", err)
	}
}

// issueRoute makes a node's certificate, for both ends of a route (the
// node dialled: server; the node dialling: client), for 127.0.0.1.
func (p *pki) issueRoute(t *testing.T, name string) TLSFiles {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return TLSFiles{Cert: p.write(t, name+".pem", "CERTIFICATE", der), Key: p.write(t, name+"-key.pem", "EC PRIVATE KEY", kder),
		CA: filepath.Join(p.dir, "ca.pem")}
}

// Two nodes with route TLS from one authority form a cluster; a third
// whose certificate another authority signed is refused as a route (it
// has the right secret: TLS alone keeps it out).
func TestRouteTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster in -short mode")
	}
	if _, err := RouteTLS(TLSFiles{Cert: "a", Key: "b"}); err == nil || !strings.Contains(err.Error(), "--tls-ca") {
		t.Errorf("route TLS without a CA: %v", err)
	}
	ca, other := newPKI(t, "route-ca"), newPKI(t, "intruder-ca")
	ports, err := freeport.Pick("127.0.0.1", 3)
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	secret, _ := NewRouteSecret()
	start := func(i int, files TLSFiles) *broker.Server {
		tc, err := RouteTLS(files)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := broker.StartServer(ctx, broker.ServerConfig{Dir: t.TempDir(), Name: fmt.Sprintf("n%d", i+1),
			Cluster: broker.ClusterNode{Name: "tls", Port: ports[i], Routes: routes, Secret: secret, TLS: tc}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Shutdown)
		return s
	}
	n1 := start(0, ca.issueRoute(t, "n1"))
	start(1, ca.issueRoute(t, "n2"))
	t0 := time.Now()
	for n1.State().Leader == "" || len(n1.State().Routed) != 1 {
		if time.Since(t0) > 3*time.Minute {
			t.Fatalf("two TLS nodes: %+v", n1.State())
		}
		time.Sleep(20 * time.Millisecond)
	}
	intruder := start(2, other.issueRoute(t, "n3"))
	time.Sleep(2 * time.Second)
	if r := intruder.State().Routed; len(r) != 0 {
		t.Errorf("a node with another authority's certificate is routed to %v", r)
	}
	if r := n1.State().Routed; len(r) != 1 {
		t.Errorf("node 1 routed to %v", r)
	}
}
