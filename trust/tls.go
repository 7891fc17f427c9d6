package trust

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSFiles names the PEM files of the --tls-cert, --tls-key and --tls-ca
// flags.
type TLSFiles struct {
	Cert string // certificate chain of this side
	Key  string // its private key
	CA   string // certificates of the authorities that sign the other side's
}

// Enabled reports whether any file is set.
func (f TLSFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// ServerTLS is the broker's TLS configuration: its certificate and key
// (both required) and, with a CA file, mutual TLS: every client must
// present a certificate signed by one of those authorities. TLS 1.2 at
// least.
func ServerTLS(f TLSFiles) (*tls.Config, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("trust: TLS server needs both --tls-cert and --tls-key")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("trust: TLS certificate %s and key %s: %w", f.Cert, f.Key, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if f.CA != "" {
		pool, err := loadPool(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientTLS is a participant's TLS configuration: the authorities that
// sign the broker's certificate (CA; empty means the system's roots) and,
// for mutual TLS, its own certificate and key (both or neither).
// serverName overrides the name checked in the broker's certificate
// ("" means the host of the URL, as nats.go sets it).
func ClientTLS(f TLSFiles, serverName string) (*tls.Config, error) {
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("trust: a TLS client certificate needs both --tls-cert and --tls-key")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("trust: TLS certificate %s and key %s: %w", f.Cert, f.Key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if f.CA != "" {
		pool, err := loadPool(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("trust: TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("trust: TLS CA %s holds no PEM certificate", path)
	}
	return pool, nil
}
