package run

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/trust"
)

// testPKI makes a certificate authority and, signed by it, a certificate
// for a broker on 127.0.0.1 and one for a client, as PEM files in dir.
func testPKI(t *testing.T, dir string) (srv, cli trust.TLSFiles) {
	t.Helper()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := write("ca.pem", "CERTIFICATE", caDER)
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) trust.TLSFiles {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		c := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, c, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return trust.TLSFiles{Cert: write(name+".pem", "CERTIFICATE", der), Key: write(name+"-key.pem", "EC PRIVATE KEY", kd), CA: caFile}
	}
	return issue("broker", 2, x509.ExtKeyUsageServerAuth), issue("client", 3, x509.ExtKeyUsageClientAuth)
}

// A run through a broker that requires mutual TLS: with the client's
// certificate and the authority it trains; without them it is refused at
// connect, with an error that says so.
func TestTrainOverMutualTLS(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	srvFiles, cliFiles := testPKI(t, dir)
	tc, err := trust.ServerTLS(srvFiles)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: filepath.Join(dir, "store"), Configure: func(o *server.Options) {
		o.TLSConfig, o.TLS, o.TLSVerify, o.TLSTimeout = tc, true, true, 2
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()

	cfg := func(run string, files trust.TLSFiles) Config {
		return New(func(c *Config) {
			c.Synthetic = small()
			c.Parties = 2
			c.Batch = 8
			c.Window = 2
			c.NATS = srv.URL()
			c.Run = run
			c.TLS = files
			c.MaxSteps = 600
			c.Seed = 1
			c.EvalEvery = 200 * time.Millisecond
			c.JoinWait = 20 * time.Second
		})
	}
	tctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	s, err := Train(tctx, cfg("tls", cliFiles), Hooks{Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s)
	if s.Steps < 600 {
		t.Errorf("%d steps over TLS", s.Steps)
	}

	// No client certificate: the broker refuses the handshake.
	_, err = Train(tctx, cfg("tls-nocert", trust.TLSFiles{CA: cliFiles.CA}), Hooks{})
	if err == nil {
		t.Fatal("a client without a certificate trained through a broker that requires one")
	}
	t.Logf("without a client certificate: %v", err)
	// No TLS at all: refused too.
	if _, err = Train(tctx, cfg("tls-plain", trust.TLSFiles{}), Hooks{}); err == nil {
		t.Fatal("a plain client trained through a TLS broker")
	}
	t.Logf("without TLS: %v", err)
	// TLS files without an external broker are a configuration error.
	c := cfg("tls-embedded", cliFiles)
	c.NATS = ""
	if _, err := Train(tctx, c, Hooks{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("TLS files with the embedded broker: %v, want ErrConfig", err)
	}
}
