package cli

import (
	"crypto/tls"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// broker --tls-*: the server requires TLS, and client certificates when
// the configuration asks for them, after whatever else configured it.
func TestWithTLS(t *testing.T) {
	t.Parallel()
	called := false
	for _, tc := range []struct {
		cfg    *tls.Config
		verify bool
	}{{&tls.Config{}, false}, {&tls.Config{ClientAuth: tls.RequireAndVerifyClientCert}, true}} {
		var o server.Options
		withTLS(func(*server.Options) { called = true }, tc.cfg)(&o)
		if !called || !o.TLS || o.TLSConfig != tc.cfg || o.TLSVerify != tc.verify {
			t.Errorf("options %+v (earlier configuration called: %v), want TLS with verify %v", o, called, tc.verify)
		}
	}
}
