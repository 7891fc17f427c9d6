package trust

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// A route secret authenticates the routes between the nodes of a broker
// cluster (asyrevel broker --cluster-name ... --route-secret FILE): a node
// admits as a route only a node that presents it. Every node of the
// cluster holds the same, in a file of its own (asyrevel keys route);
// whoever holds it can join the cluster and read every run's stream, so
// it is kept as secret as a participant's key.

// RouteSecretFile is the route secret's file name in a run's keys folder
// (asyrevel keys --run R --parties Q --out DIR --route).
const RouteSecretFile = "route.secret"

// ErrRouteSecret is the error of a route secret that cannot be used.
var ErrRouteSecret = errors.New("trust: route secret")

// routeSecretBytes is the entropy of a route secret.
const routeSecretBytes = 32

// minRouteSecret is the shortest route secret accepted (96 bits).
const minRouteSecret = 16

// NewRouteSecret makes a random route secret: 32 random bytes in
// URL-safe base64 (43 characters; it travels in the routes' URLs).
func NewRouteSecret() (string, error) {
	b := make([]byte, routeSecretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("%w: %w", ErrRouteSecret, err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// CheckRouteSecret checks a route secret's form: at least 16 characters
// of URL-safe base64.
func CheckRouteSecret(s string) error {
	if len(s) < minRouteSecret {
		return fmt.Errorf("%w: %d characters, want at least %d (asyrevel keys route makes one)", ErrRouteSecret, len(s), minRouteSecret)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("%w: holds %q, want URL-safe base64 only (asyrevel keys route makes one)", ErrRouteSecret, r)
		}
	}
	return nil
}

// WriteRouteSecret writes a new route secret to path (mode 0600); an
// existing file is replaced only with force.
func WriteRouteSecret(path string, force bool) error {
	s, err := NewRouteSecret()
	if err != nil {
		return err
	}
	flag := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flag = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRouteSecret, err)
	}
	if _, err := f.WriteString(s + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("%w: %w", ErrRouteSecret, err)
	}
	return f.Close()
}

// ReadRouteSecret reads and checks the route secret of file path (one
// line; surrounding white space is ignored).
func ReadRouteSecret(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrRouteSecret, err)
	}
	if len(raw) > 4096 {
		return "", fmt.Errorf("%w: %s is %d bytes, not a route secret", ErrRouteSecret, path, len(raw))
	}
	s := strings.TrimSpace(string(raw))
	if err := CheckRouteSecret(s); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// RouteTLS is the TLS configuration of a cluster node's routes: its
// certificate and key, and the authorities (CA) that sign the other
// nodes' certificates, all three required. A route is both ways a client
// and a server: each node presents its certificate and verifies the
// other's, as a server (the node that dials in) and as a client (the node
// dialled, whose certificate must name the host of its route URL).
func RouteTLS(f TLSFiles) (*tls.Config, error) {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return nil, errors.New("trust: TLS routes need --tls-cert, --tls-key and --tls-ca (the authority of the other nodes' certificates)")
	}
	cfg, err := ServerTLS(f)
	if err != nil {
		return nil, err
	}
	cfg.RootCAs = cfg.ClientCAs
	return cfg, nil
}
