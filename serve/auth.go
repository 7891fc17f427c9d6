package serve

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asyrevel/asyrevel/internal/atomicfile"
)

// Client tokens of the HTTP service.
//
// A token is "asy1.ID.SECRET": ID is the client's public id (16 hex
// digits, it names the client in the clients file), SECRET 32 random
// bytes (base64url). The service keeps only the SHA-256 of the whole
// token (clients.json): the secret has 256 bits, so a plain hash is as
// strong as a slow one, and a stolen clients file gives no token. A
// request's token is found by its ID and its hash compared in constant
// time (crypto/subtle); no token is ever logged.

// Scopes a client token may carry.
const (
	ScopePredict = "predict" // POST /v1/predict
	ScopeMetrics = "metrics" // GET /metrics
)

// Files and defaults of the client tokens.
const (
	ClientsFile   = "clients.json" // the hashed tokens the service reads
	AccessKeyFile = "access.key"   // the key of the access log's id hashes
	TokenPrefix   = "asy1"
	// DefaultRate and DefaultBurst bound a client without limits of its
	// own: ids a second, and the ids it may ask at once after a pause.
	DefaultRate     = 100
	DefaultBurst    = 1000
	DefaultValidity = 365 * 24 * time.Hour
	clientsVersion  = 1
	maxClientsFile  = 16 << 20
)

// ErrClients reports a clients file that cannot be used.
var ErrClients = errors.New("serve: bad clients file")

// Client is one client's entry of the clients file.
type Client struct {
	Name string `json:"name"`
	ID   string `json:"id"` // public: the token's middle part
	// SHA256 is the hex SHA-256 of the whole token.
	SHA256 string   `json:"sha256"`
	Scopes []string `json:"scopes"`
	// Rate (ids a second) and Burst bound the client's requests; 0 means
	// the service's defaults (serve --rate, --burst).
	Rate    float64   `json:"rate,omitempty"`
	Burst   int       `json:"burst,omitempty"`
	Created time.Time `json:"created"`
	// Expires is when the token stops working (zero: never).
	Expires time.Time `json:"expires,omitzero"`
}

// Clients is the clients file: every client the service answers.
type Clients struct {
	Version int      `json:"version"`
	Clients []Client `json:"clients"`
}

var clientName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// CheckClientName checks a client's name: 1 to 64 letters, digits, '_',
// '.' and '-', starting with a letter or digit.
func CheckClientName(name string) error {
	if !clientName.MatchString(name) {
		return fmt.Errorf("%w: client name %q: 1 to 64 letters, digits, '_', '.' and '-'", ErrClients, name)
	}
	return nil
}

// ReadClients reads a clients file and checks it.
func ReadClients(path string) (*Clients, error) {
	b, err := readLimited(path, maxClientsFile)
	if err != nil {
		return nil, err
	}
	var c Clients
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrClients, path, err)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrClients, path, limit)
	}
	return b, nil
}

func (c *Clients) check() error {
	if c.Version != clientsVersion {
		return fmt.Errorf("%w: version %d, this asyrevel reads %d", ErrClients, c.Version, clientsVersion)
	}
	names, ids := map[string]bool{}, map[string]bool{}
	for _, cl := range c.Clients {
		if err := CheckClientName(cl.Name); err != nil {
			return err
		}
		if len(cl.ID) != 16 || !isHex(cl.ID) || len(cl.SHA256) != 64 || !isHex(cl.SHA256) {
			return fmt.Errorf("%w: client %s: malformed id or hash", ErrClients, cl.Name)
		}
		if names[cl.Name] || ids[cl.ID] {
			return fmt.Errorf("%w: client %s (id %s) is listed twice", ErrClients, cl.Name, cl.ID)
		}
		names[cl.Name], ids[cl.ID] = true, true
		if len(cl.Scopes) == 0 {
			return fmt.Errorf("%w: client %s has no scope", ErrClients, cl.Name)
		}
		for _, s := range cl.Scopes {
			if s != ScopePredict && s != ScopeMetrics {
				return fmt.Errorf("%w: client %s: unknown scope %q (predict, metrics)", ErrClients, cl.Name, s)
			}
		}
		if cl.Rate < 0 || math.IsNaN(cl.Rate) || math.IsInf(cl.Rate, 0) || cl.Burst < 0 {
			return fmt.Errorf("%w: client %s: rate %v, burst %d", ErrClients, cl.Name, cl.Rate, cl.Burst)
		}
	}
	return nil
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// Write writes the clients file atomically, mode 0600.
func (c *Clients) Write(path string) error {
	c.Version = clientsVersion
	if err := c.check(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(path, append(b, '\n'), 0o600)
}

func writeAtomic(path string, b []byte, perm fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return writeFile(path, perm, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// writeFile writes path atomically (atomicfile.Write: a reader never sees
// half a file), with mode perm less the umask. The folder must exist.
func writeFile(path string, perm fs.FileMode, write func(io.Writer) error) error {
	if err := atomicfile.Write(path, perm, write); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// Client returns the entry of the client named name.
func (c *Clients) Client(name string) (*Client, bool) {
	for i := range c.Clients {
		if c.Clients[i].Name == name {
			return &c.Clients[i], true
		}
	}
	return nil, false
}

// IssueOptions are a new token's scopes, limits and lifetime.
type IssueOptions struct {
	Scopes []string      // default: predict
	Rate   float64       // 0: the service's default
	Burst  int           // 0: the service's default
	Valid  time.Duration // 0: never expires
	// Replace lets a client that exists get a new token (its old one
	// stops working).
	Replace bool
	Now     time.Time // default time.Now()
}

// Issue makes a token for the client named name, records its hash and
// returns the token (the only time it exists in full).
func (c *Clients) Issue(name string, o IssueOptions) (string, error) {
	if err := CheckClientName(name); err != nil {
		return "", err
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if len(o.Scopes) == 0 {
		o.Scopes = []string{ScopePredict}
	}
	i := slices.IndexFunc(c.Clients, func(cl Client) bool { return cl.Name == name })
	if i >= 0 && !o.Replace {
		return "", fmt.Errorf("%w: client %s exists (--force gives it a new token; its old one stops working)", fs.ErrExist, name)
	}
	var idb [8]byte
	var secret [32]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return "", err
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(idb[:])
	tok := TokenPrefix + "." + id + "." + base64.RawURLEncoding.EncodeToString(secret[:])
	h := sha256.Sum256([]byte(tok))
	cl := Client{Name: name, ID: id, SHA256: hex.EncodeToString(h[:]), Scopes: slices.Clone(o.Scopes), Rate: o.Rate, Burst: o.Burst, Created: o.Now.UTC().Truncate(time.Second)}
	if o.Valid > 0 {
		cl.Expires = o.Now.Add(o.Valid).UTC().Truncate(time.Second)
	}
	if i >= 0 {
		c.Clients[i] = cl
	} else {
		c.Clients = append(c.Clients, cl)
	}
	c.Version = clientsVersion
	if err := c.check(); err != nil {
		return "", err
	}
	return tok, nil
}

// Revoke removes the client named name; false if there is none.
func (c *Clients) Revoke(name string) bool {
	n := len(c.Clients)
	c.Clients = slices.DeleteFunc(c.Clients, func(cl Client) bool { return cl.Name == name })
	return len(c.Clients) < n
}

// tokenID is the public id of a well-formed token, "" otherwise.
func tokenID(tok string) string {
	rest, ok := strings.CutPrefix(tok, TokenPrefix+".")
	if !ok {
		return ""
	}
	id, secret, ok := strings.Cut(rest, ".")
	if !ok || len(id) != 16 || !isHex(id) || len(secret) != 43 {
		return ""
	}
	return id
}

// ReadAccessKey reads the access log's key (hex, 32 bytes).
func ReadAccessKey(path string) ([]byte, error) {
	b, err := readLimited(path, 1024)
	if err != nil {
		return nil, err
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) != 32 {
		return nil, fmt.Errorf("%s: not an access log key (64 hex digits)", path)
	}
	return k, nil
}

// MakeAccessKey reads the access log's key at path, or makes one (mode
// 0600) if there is none.
func MakeAccessKey(path string) ([]byte, error) {
	k, err := ReadAccessKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	k = make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	return k, writeAtomic(path, []byte(hex.EncodeToString(k)+"\n"), 0o600)
}

// AuthConfig configures the service's authentication.
type AuthConfig struct {
	// Clients are the token holders (may be nil or empty with
	// Certificates).
	Clients *Clients
	// Certificates admits a request without a token whose TLS
	// connection presented a client certificate the server verified
	// (mutual TLS: the server's ClientCAs): the client is named by the
	// certificate's Common Name, and takes the scopes and limits of the
	// clients file's entry of that name, else the predict scope and the
	// default limits.
	Certificates bool
	// Rate and Burst bound every client without limits of its own
	// (defaults DefaultRate, DefaultBurst).
	Rate  float64
	Burst int
	// Now is the clock (default time.Now), for tests.
	Now func() time.Time
}

// Auth checks the service's requests against the clients file and keeps
// each client's token bucket. Safe for concurrent use.
type Auth struct {
	cfg      AuthConfig
	minBurst float64
	mu       sync.RWMutex
	byID     map[string]*clientState
	byCert   map[string]*clientState // certificate clients, by Common Name
}

// clientState is one client and its bucket.
type clientState struct {
	Client
	hash  [32]byte
	scope map[string]bool

	mu     sync.Mutex
	rate   float64 // ids a second
	burst  float64
	tokens float64
	last   time.Time
}

// NewAuth makes the service's authentication from a clients file.
func NewAuth(cfg AuthConfig) (*Auth, error) {
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &Auth{cfg: cfg}
	if err := a.Reload(cfg.Clients); err != nil {
		return nil, err
	}
	return a, nil
}

// Reload replaces the clients (a new clients file): new and changed
// tokens work at once, revoked ones stop; a client whose token did not
// change keeps its bucket.
func (a *Auth) Reload(c *Clients) error {
	if c == nil && a.cfg.Certificates {
		c = &Clients{Version: clientsVersion}
	}
	if c == nil {
		return fmt.Errorf("%w: no clients", ErrClients)
	}
	if err := c.check(); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.byID
	a.byID = make(map[string]*clientState, len(c.Clients))
	a.byCert = map[string]*clientState{} // their entries may have changed
	now := a.cfg.Now()
	for _, cl := range c.Clients {
		st := a.newState(cl, now)
		if o := old[cl.ID]; o != nil && o.hash == st.hash {
			o.mu.Lock()
			st.tokens, st.last = min(o.tokens, st.burst), o.last
			o.mu.Unlock()
		}
		a.byID[cl.ID] = st
	}
	a.cfg.Clients = c
	return nil
}

// newState is a client's state with a full bucket (a.mu held).
func (a *Auth) newState(cl Client, now time.Time) *clientState {
	st := &clientState{Client: cl, scope: map[string]bool{}}
	h, _ := hex.DecodeString(cl.SHA256)
	copy(st.hash[:], h)
	for _, s := range cl.Scopes {
		st.scope[s] = true
	}
	st.rate, st.burst = cl.Rate, float64(cl.Burst)
	if st.rate <= 0 {
		st.rate = a.cfg.Rate
	}
	if st.burst <= 0 {
		st.burst = float64(a.cfg.Burst)
	}
	st.burst = max(st.burst, a.minBurst)
	st.tokens, st.last = st.burst, now
	return st
}

// certClient is the client of a verified certificate's Common Name.
func (a *Auth) certClient(name string) *clientState {
	a.mu.RLock()
	st := a.byCert[name]
	a.mu.RUnlock()
	if st != nil {
		return st
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if st = a.byCert[name]; st != nil {
		return st
	}
	cl := Client{Name: name, Scopes: []string{ScopePredict}}
	if e, ok := a.cfg.Clients.Client(name); ok {
		cl = Client{Name: name, Scopes: e.Scopes, Rate: e.Rate, Burst: e.Burst}
	}
	st = a.newState(cl, a.cfg.Now())
	a.byCert[name] = st
	return st
}

// setMinBurst makes every bucket hold at least n ids, so that a request
// of the service's largest size can pass.
func (a *Auth) setMinBurst(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.minBurst = float64(n)
	for _, st := range a.byCert {
		st.mu.Lock()
		st.burst = max(st.burst, a.minBurst)
		st.mu.Unlock()
	}
	for _, st := range a.byID {
		st.mu.Lock()
		if st.burst < a.minBurst {
			st.burst = a.minBurst
			st.tokens = st.burst
		}
		st.mu.Unlock()
	}
}

// Expiring lists the clients whose token has expired or expires within d.
func (a *Auth) Expiring(d time.Duration) []Client {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []Client
	now := a.cfg.Now()
	for _, st := range a.byID {
		if !st.Expires.IsZero() && st.Expires.Before(now.Add(d)) {
			out = append(out, st.Client)
		}
	}
	slices.SortFunc(out, func(x, y Client) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// Len is the number of clients.
func (a *Auth) Len() int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return len(a.byID)
}

// refusal is why a request was not answered, with the fix for its body.
type refusal struct {
	code   int
	client string // the client, when it is known
	reason string // for the access log: no_token, bad_token, expired, scope, rate
	msg    string
	fix    string
	retry  time.Duration // 429: Retry-After
}

// How an operator issues a token, for the answers' fixes.
const issueHint = "asyrevel keys client --name NAME --out DIR"

// check authenticates r for scope: its client, or why not.
func (a *Auth) check(r *http.Request, scope string) (*clientState, *refusal) {
	h := r.Header.Get("Authorization")
	if h == "" && a.cfg.Certificates && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		name := r.TLS.VerifiedChains[0][0].Subject.CommonName
		if CheckClientName(name) != nil {
			return nil, &refusal{code: http.StatusUnauthorized, reason: "bad_certificate", msg: fmt.Sprintf("the client certificate's Common Name %q is not a client name", name),
				fix: "a client certificate names its client in its Common Name: 1 to 64 letters, digits, '_', '.' and '-'"}
		}
		st := a.certClient(name)
		if !st.scope[scope] {
			return st, &refusal{code: http.StatusForbidden, client: st.Name, reason: "scope",
				msg: fmt.Sprintf("client %s (certificate) may call %s, not %s", st.Name, strings.Join(st.Scopes, " and "), scope),
				fix: fmt.Sprintf("the operator lists %s in the clients file with that scope (asyrevel keys client --name %s --scope %s --out DIR --force)", st.Name, st.Name, strings.Join(append(slices.Clone(st.Scopes), scope), ","))}
		}
		return st, nil
	}
	if h == "" {
		return nil, &refusal{code: http.StatusUnauthorized, reason: "no_token", msg: "this service answers only its clients: the request has no token",
			fix: "send the header 'Authorization: Bearer TOKEN' with the token the service's operator issued to you (" + issueHint + ")"}
	}
	scheme, tok, _ := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return nil, &refusal{code: http.StatusUnauthorized, reason: "bad_token", msg: "the Authorization header is not 'Bearer TOKEN'",
			fix: "send the header 'Authorization: Bearer TOKEN' with the token the service's operator issued to you (" + issueHint + ")"}
	}
	id := tokenID(tok)
	a.mu.RLock()
	st := a.byID[id]
	a.mu.RUnlock()
	sum := sha256.Sum256([]byte(tok))
	var want [32]byte
	if st != nil {
		want = st.hash
	}
	if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 || st == nil {
		return nil, &refusal{code: http.StatusUnauthorized, reason: "bad_token", msg: "the token is not one this service issued (unknown, altered or revoked)",
			fix: "ask the service's operator for a token of your own (" + issueHint + ")"}
	}
	if !st.Expires.IsZero() && !a.cfg.Now().Before(st.Expires) {
		return st, &refusal{code: http.StatusUnauthorized, client: st.Name, reason: "expired",
			msg: fmt.Sprintf("client %s's token expired at %s", st.Name, st.Expires.Format(time.RFC3339)),
			fix: fmt.Sprintf("ask the service's operator for a new token (asyrevel keys client --name %s --out DIR --force)", st.Name)}
	}
	if !st.scope[scope] {
		return st, &refusal{code: http.StatusForbidden, client: st.Name, reason: "scope",
			msg: fmt.Sprintf("client %s's token is for %s, not %s", st.Name, strings.Join(st.Scopes, " and "), scope),
			fix: fmt.Sprintf("ask the service's operator for a token with that scope (asyrevel keys client --name %s --scope %s --out DIR --force)", st.Name, strings.Join(append(slices.Clone(st.Scopes), scope), ","))}
	}
	return st, nil
}

// take takes n ids from the client's bucket, or says how long until
// they are there.
func (st *clientState) take(n int, now time.Time) (bool, time.Duration) {
	if n <= 0 {
		return true, 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if d := now.Sub(st.last).Seconds(); d > 0 {
		st.tokens = min(st.burst, st.tokens+d*st.rate)
		st.last = now
	}
	need := float64(n)
	if st.tokens >= need {
		st.tokens -= need
		return true, 0
	}
	return false, time.Duration((min(need, st.burst) - st.tokens) / st.rate * float64(time.Second))
}

// refund gives n ids back to the client's bucket (a request refused
// after the guard took its first id).
func (st *clientState) refund(n int) {
	st.mu.Lock()
	st.tokens = min(st.burst, st.tokens+float64(n))
	st.mu.Unlock()
}

// overRate is the 429 of a client that asked too fast.
func overRate(st *clientState, wait time.Duration) *refusal {
	secs := max(1, int(math.Ceil(wait.Seconds())))
	return &refusal{code: http.StatusTooManyRequests, client: st.Name, reason: "rate", retry: time.Duration(secs) * time.Second,
		msg: fmt.Sprintf("client %s may ask for %g ids a second (bursts of %g); retry after %d s", st.Name, st.rate, st.burst, secs),
		fix: fmt.Sprintf("wait Retry-After seconds and send fewer ids a second; the operator can raise the limit (serve --rate, or the client's own: asyrevel keys client --name %s --rate N --out DIR --force)", st.Name)}
}
