package serve

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzAuthHeader: whatever the Authorization header, the check never
// panics, and it admits a request only with the issued token itself
// (after "Bearer ", in any case, with surrounding blanks).
func FuzzAuthHeader(f *testing.F) {
	var clients Clients
	tok, err := clients.Issue("crm", IssueOptions{})
	if err != nil {
		f.Fatal(err)
	}
	auth, err := NewAuth(AuthConfig{Clients: &clients})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"", "Bearer " + tok, "bearer " + tok, "Bearer " + tok[:len(tok)-1], "Basic x", "Bearer asy1..", "Bearer asy1.0123456789abcdef." + strings.Repeat("A", 43), tok} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r := httptest.NewRequest("POST", "/v1/predict", nil)
		r.Header["Authorization"] = []string{h}
		st, ref := auth.check(r, ScopePredict)
		scheme, rest, _ := strings.Cut(h, " ")
		genuine := strings.EqualFold(scheme, "Bearer") && strings.TrimSpace(rest) == tok
		if (ref == nil) != genuine {
			t.Fatalf("header %q: admitted %v (client %v), genuine %v", h, ref == nil, st != nil, genuine)
		}
		if ref != nil && (ref.msg == "" || ref.fix == "" || strings.Contains(ref.msg+ref.fix, tok[len(tok)-43:])) {
			t.Fatalf("header %q: refusal %+v", h, ref)
		}
	})
}
