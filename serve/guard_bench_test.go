package serve

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkGuard is the CPU cost of the client check alone, per request:
// the guard around a handler that does nothing, without authentication
// and an access log (none), with the access log (insecure), and with a
// token, the client's bucket and the access log (tokens).
func BenchmarkGuard(b *testing.B) {
	var clients Clients
	tok, err := clients.Issue("bench", IssueOptions{Rate: 1e12, Burst: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	auth, err := NewAuth(AuthConfig{Clients: &clients})
	if err != nil {
		b.Fatal(err)
	}
	key := make([]byte, 32)
	for _, v := range []struct {
		name   string
		cfg    ServiceConfig
		logged bool
	}{{"none", ServiceConfig{InsecureNoAuth: true}, false}, {"insecure", ServiceConfig{InsecureNoAuth: true}, true}, {"tokens", ServiceConfig{Auth: auth}, true}} {
		b.Run(v.name, func(b *testing.B) {
			cfg := v.cfg
			if v.logged {
				al, err := NewAccessLog(io.Discard, nil, key)
				if err != nil {
					b.Fatal(err)
				}
				defer al.Close()
				cfg.Access = al
			}
			s := NewService(cfg)
			h := s.guard(ScopePredict, func(w http.ResponseWriter, _ *http.Request, req *request) {
				req.ids = []string{"C1234567"}
				w.WriteHeader(http.StatusOK)
			})
			r := httptest.NewRequest("POST", "/v1/predict", strings.NewReader(`{"ids":["C1234567"]}`))
			r.Header.Set("Authorization", "Bearer "+tok)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatal(w.Code)
				}
			}
		})
	}
}
