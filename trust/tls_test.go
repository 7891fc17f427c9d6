package trust

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// pki is a test certificate authority and the PEM files it signed.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	p := &pki{dir: t.TempDir(), caCert: cert, caKey: key}
	p.write(t, "ca.pem", "CERTIFICATE", der)
	return p
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue makes a certificate for name (server: for 127.0.0.1 and
// localhost) and returns its files.
func (p *pki) issue(t *testing.T, name string, serverCert bool) TLSFiles {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if serverCert {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return TLSFiles{
		Cert: p.write(t, name+".pem", "CERTIFICATE", der),
		Key:  p.write(t, name+"-key.pem", "EC PRIVATE KEY", kder),
		CA:   filepath.Join(p.dir, "ca.pem"),
	}
}

// handshake runs a TLS handshake between the two configurations over
// loopback TCP and returns the client's and the server's errors.
func handshake(t *testing.T, srv, cli *tls.Config) (error, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	errs := make(chan error, 1)
	go func() {
		a, err := l.Accept()
		if err != nil {
			errs <- err
			return
		}
		defer a.Close()
		a.SetDeadline(time.Now().Add(10 * time.Second))
		s := tls.Server(a, srv)
		err = s.Handshake()
		if err == nil {
			// TLS 1.3 reports a refused client certificate on the first read.
			_, err = s.Read(make([]byte, 1))
		}
		errs <- err
	}()
	b, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b.SetDeadline(time.Now().Add(10 * time.Second))
	c := tls.Client(b, cli)
	err = c.Handshake()
	if err == nil {
		_, err = c.Write([]byte("x"))
		if err == nil {
			// A refused certificate arrives as an alert on the next read.
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, rerr := c.Read(make([]byte, 1))
			if rerr != nil && !isTimeout(rerr) && !strings.Contains(rerr.Error(), "EOF") {
				err = rerr
			}
		}
	}
	b.Close()
	return err, <-errs
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestTLS(t *testing.T) {
	ca := newPKI(t, "asyrevel test CA")
	other := newPKI(t, "another CA")
	srvFiles := ca.issue(t, "broker", true)
	cliFiles := ca.issue(t, "party-1", false)
	strangerFiles := other.issue(t, "stranger", false)

	srv, err := ServerTLS(srvFiles)
	if err != nil {
		t.Fatal(err)
	}
	if srv.ClientAuth != tls.RequireAndVerifyClientCert || srv.MinVersion < tls.VersionTLS12 {
		t.Fatalf("server config %+v", srv)
	}
	mk := func(f TLSFiles) *tls.Config {
		c, err := ClientTLS(f, "localhost")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Mutual TLS with certificates of the run's CA.
	if ce, se := handshake(t, srv, mk(cliFiles)); ce != nil || se != nil {
		t.Fatalf("handshake: client %v, server %v", ce, se)
	}
	// A client without a certificate, or with one of another CA, is refused.
	if _, se := handshake(t, srv, mk(TLSFiles{CA: cliFiles.CA})); se == nil {
		t.Fatalf("client without certificate accepted: %v", se)
	}
	if _, se := handshake(t, srv, mk(TLSFiles{Cert: strangerFiles.Cert, Key: strangerFiles.Key, CA: cliFiles.CA})); se == nil {
		t.Fatalf("client of another CA accepted: %v", se)
	}
	// A client that trusts another CA refuses the broker.
	if ce, _ := handshake(t, srv, mk(TLSFiles{CA: strangerFiles.CA})); ce == nil {
		t.Fatal("client accepted a broker of another CA")
	}
	// A broker without CA file does not ask for client certificates.
	plain, err := ServerTLS(TLSFiles{Cert: srvFiles.Cert, Key: srvFiles.Key})
	if err != nil || plain.ClientAuth != tls.NoClientCert {
		t.Fatalf("server without CA: %v", err)
	}
	if ce, se := handshake(t, plain, mk(TLSFiles{CA: srvFiles.CA})); ce != nil || se != nil {
		t.Fatalf("server-only TLS: %v %v", ce, se)
	}

	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"server without key", func() error { _, err := ServerTLS(TLSFiles{Cert: srvFiles.Cert}); return err }, "--tls-key"},
		{"client with half a pair", func() error { _, err := ClientTLS(TLSFiles{Key: cliFiles.Key}, ""); return err }, "both"},
		{"missing file", func() error { _, err := ServerTLS(TLSFiles{Cert: "/nonexistent", Key: srvFiles.Key}); return err }, "nonexistent"},
		{"key of another certificate", func() error { _, err := ServerTLS(TLSFiles{Cert: srvFiles.Cert, Key: cliFiles.Key}); return err }, "key"},
		{"CA file without certificate", func() error { _, err := ClientTLS(TLSFiles{CA: srvFiles.Key}, ""); return err }, "no PEM certificate"},
	} {
		if err := tc.err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if (TLSFiles{}).Enabled() || !(TLSFiles{CA: "x"}).Enabled() {
		t.Fatal("Enabled")
	}
}

// TestTLSNATS connects a participant to an embedded nats-server over
// mutual TLS, with its nkey on top.
func TestTLSNATS(t *testing.T) {
	ca := newPKI(t, "asyrevel test CA")
	srvTLS, err := ServerTLS(ca.issue(t, "broker", true))
	if err != nil {
		t.Fatal(err)
	}
	tr := newTestRun(t, "tls", 1)
	grants, _ := tr.roster.Grants(BrokerPolicy{})
	ns := startServer(t, &server.Options{TLSConfig: srvTLS, TLSVerify: true, TLSTimeout: 5, Nkeys: NkeyUsers(grants)})
	cliTLS, err := ClientTLS(ca.issue(t, "party-1", false), "")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.Secure(cliTLS), tr.keys["party-1"].NATSOption(),
		nats.CustomInboxPrefix(InboxPrefix("tls", "party-1")))
	if err != nil {
		t.Fatalf("TLS connection: %v", err)
	}
	defer nc.Close()
	if !nc.TLSRequired() {
		t.Fatal("connection not over TLS")
	}
	if err := nc.Publish("asyrevel.tls.out.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Without a client certificate: refused.
	noCert, _ := ClientTLS(TLSFiles{CA: filepath.Join(ca.dir, "ca.pem")}, "")
	if nc2, err := nats.Connect(ns.ClientURL(), nats.Secure(noCert), tr.keys["party-1"].NATSOption(), nats.MaxReconnects(0)); err == nil {
		nc2.Close()
		t.Fatal("connection without client certificate accepted")
	}
}
