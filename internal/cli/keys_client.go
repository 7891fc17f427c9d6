package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/asyrevel/asyrevel/internal/atomicfile"
	"github.com/asyrevel/asyrevel/serve"
)

// cmdKeysClient is asyrevel keys client: the client tokens of asyrevel
// serve.
func cmdKeysClient(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("keys client", "asyrevel keys client --name NAME --out DIR [--scope predict,metrics] [--rate N] [--burst N] [--valid 8760h] [--force]\n"+
		"       asyrevel keys client --revoke NAME --out DIR\n"+
		"       asyrevel keys client --hash-id ID --out DIR\n\n"+
		"Issues a client token of asyrevel serve: DIR/NAME.token holds the token (mode 0600: give it\n"+
		"to the client, who sends 'Authorization: Bearer TOKEN'), DIR/clients.json its SHA-256 with\n"+
		"the client's scopes, rate and expiry (serve --clients DIR/clients.json; serve finds\n"+
		"MODELS/../keys/clients.json itself). DIR/access.key, made once, keys the hashes of the ids\n"+
		"in serve's access log; --hash-id ID prints an id's hash to find its requests there.\n"+
		"A running serve reads a changed clients file on SIGHUP (or a restart): --revoke and\n"+
		"--force take effect then.", stderr)
	name := fs.String("name", "", "the client's `NAME` (letters, digits, '_', '.', '-'), as the access log names it")
	out := fs.String("out", "", "the `DIR` of clients.json, access.key and the tokens (e.g. OUT/keys)")
	scopes := fs.String("scope", serve.ScopePredict, "what the token may do: predict (POST /v1/predict), metrics (GET /metrics), or both")
	rate := fs.Float64("rate", 0, "ids a second this client may ask for (0: serve's --rate)")
	burst := fs.Int("burst", 0, "ids it may ask at once after a pause (0: serve's --burst)")
	valid := fs.Duration("valid", serve.DefaultValidity, "how long the token works (0: until revoked)")
	force := fs.Bool("force", false, "give an existing client a new token (its old one stops working)")
	revoke := fs.String("revoke", "", "remove the client `NAME`: its token stops working")
	hashID := fs.String("hash-id", "", "print `ID` as the access log writes it (keyed with DIR/access.key)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, pos[0])
	}
	if *out == "" {
		return fmt.Errorf("%w: keys client needs --out DIR", errUsage)
	}
	if n := countSet(*name != "", *revoke != "", *hashID != ""); n != 1 {
		return fmt.Errorf("%w: give one of --name NAME (issue), --revoke NAME and --hash-id ID", errUsage)
	}
	path := filepath.Join(*out, serve.ClientsFile)
	if *hashID != "" {
		key, err := serve.ReadAccessKey(filepath.Join(*out, serve.AccessKeyFile))
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, serve.HashID(key, *hashID))
		return nil
	}
	clients, err := readClientsOrNew(path)
	if err != nil {
		return err
	}
	if *revoke != "" {
		if !clients.Revoke(*revoke) {
			return fmt.Errorf("%s has no client %q", path, *revoke)
		}
		if err := clients.Write(path); err != nil {
			return err
		}
		os.Remove(filepath.Join(*out, *revoke+".token"))
		fmt.Fprintf(stdout, "client %s revoked in %s (a running serve drops it on SIGHUP or restart)\n", *revoke, path)
		return nil
	}
	if *rate < 0 || *burst < 0 || *valid < 0 {
		return fmt.Errorf("%w: --rate, --burst and --valid must not be negative", errUsage)
	}
	tokFile := filepath.Join(*out, *name+".token")
	tok, err := clients.Issue(*name, serve.IssueOptions{Scopes: splitList(*scopes), Rate: *rate, Burst: *burst, Valid: *valid, Replace: *force})
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("client %s exists in %s (--force gives it a new token; its old one stops working)", *name, path)
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if _, err := serve.MakeAccessKey(filepath.Join(*out, serve.AccessKeyFile)); err != nil {
		return err
	}
	// The token first, then its hash: a clients file never names a token
	// that was not written.
	if err := writeSecret(tokFile, tok+"\n"); err != nil {
		return err
	}
	if err := clients.Write(path); err != nil {
		return err
	}
	c, _ := clients.Client(*name)
	expires := "never expires"
	if !c.Expires.IsZero() {
		expires = "expires " + c.Expires.Format(time.RFC3339)
	}
	fmt.Fprintf(stdout, "client %s: token in %s (mode 0600; give it to the client: Authorization: Bearer TOKEN), %s\n", *name, tokFile, expires)
	fmt.Fprintf(stdout, "its hash in %s (asyrevel serve --clients %s; a running serve reads it on SIGHUP)\n", path, path)
	return nil
}

// readClientsOrNew reads a clients file, or starts an empty one.
func readClientsOrNew(path string) (*serve.Clients, error) {
	c, err := serve.ReadClients(path)
	if errors.Is(err, os.ErrNotExist) {
		return &serve.Clients{}, nil
	}
	return c, err
}

// writeSecret writes a secret file with mode 0600, replacing any.
func writeSecret(path, text string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteBytes(path, 0o600, []byte(text))
}

func countSet(b ...bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}
