package run

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/trust"
)

// TrustConfig is the trust layer's part of a Config (package trust).
type TrustConfig struct {
	// Off turns the trust layer off: messages are neither signed nor
	// verified, and the embedded broker admits anyone (for measuring the
	// layer's cost; never across organisations).
	Off bool
	// KeyFile and RosterFile are this participant's key (a seed file of
	// asyrevel keys) and the run's roster, for Aggregate and Participate;
	// without them those run without the trust layer. Train makes the
	// run's keys itself, in KeysDir.
	KeyFile, RosterFile string
	// KeysDir is where Train writes the run's keys and roster ("" =
	// OUT/keys, else a temporary folder removed at the end).
	KeysDir string
	// Receipts is the folder where a party writes its receipts ("" =
	// OUT/receipts for Train; none for Participate unless set).
	Receipts string
	// Sign says how often senders sign (zero values: the package's
	// defaults, every 1,024 messages or 100 ms).
	Sign trust.Policy
	// SealEvery is how often the aggregator publishes a signed
	// checkpoint of the log (0: aggregator.DefaultSealEvery, negative:
	// only the final one).
	SealEvery time.Duration
	// Auditor makes Train's roster list an auditor too, its key
	// auditor.nk beside the others: it reads the run's log through the
	// embedded broker and may do nothing else (trust.Roster.Auditors).
	Auditor bool
}

// runTrust is the trust material of the participants a process runs.
type runTrust struct {
	roster *trust.Roster
	keys   map[int]*trust.Key // by participant index: 0 the aggregator, m party m
	tmp    string             // a temporary keys folder to remove
}

// key is participant m's key, nil without the trust layer.
func (t *runTrust) key(m int) *trust.Key {
	if t == nil {
		return nil
	}
	return t.keys[m]
}

func (t *runTrust) rosterOrNil() *trust.Roster {
	if t == nil {
		return nil
	}
	return t.roster
}

func (t *runTrust) close() {
	if t != nil && t.tmp != "" {
		os.RemoveAll(t.tmp)
	}
}

// makeRunKeys makes the keys of every participant of a Train run and
// writes them with the roster to cfg.Trust.KeysDir, OUT/keys or a
// temporary folder.
func makeRunKeys(cfg *job) (*runTrust, error) {
	if cfg.Trust.Off {
		return nil, nil
	}
	if cfg.Resume {
		return readRunKeys(cfg)
	}
	r, keys, err := trust.GenerateRun(cfg.Run, cfg.Parties)
	if err != nil {
		return nil, fmt.Errorf("%w: making the run's keys: %w", ErrConfig, err)
	}
	var auditor *trust.Key
	if cfg.Trust.Auditor {
		if auditor, err = trust.GenerateKey(); err == nil {
			r, err = trust.NewRosterWithAuditors(r.Run, r.Participants, []trust.Participant{{ID: trust.AuditorID, PublicKey: auditor.PublicKey()}})
		}
		if err != nil {
			return nil, fmt.Errorf("%w: making the run's auditor: %w", ErrConfig, err)
		}
	}
	t := &runTrust{roster: r, keys: make(map[int]*trust.Key, len(keys))}
	for m, k := range keys {
		t.keys[m] = k
	}
	dir := cfg.Trust.KeysDir
	switch {
	case dir == "" && cfg.Out != "":
		dir = filepath.Join(cfg.Out, "keys")
	case dir == "":
		if dir, err = os.MkdirTemp("", "asyrevel-keys-"); err != nil {
			return nil, err
		}
		t.tmp = dir
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("keys folder: %w", err)
	}
	// A run's keys replace an earlier run's in the same folder (OUT/keys
	// describes one run, as OUT/summary.json does).
	if err := r.WriteFile(filepath.Join(dir, "roster.json"), true); err != nil {
		return nil, err
	}
	for m, k := range keys {
		id := trust.AggregatorID
		if m > 0 {
			id = trust.PartyID(m)
		}
		if err := trust.WriteKeyFile(filepath.Join(dir, id+".nk"), k, true); err != nil {
			return nil, err
		}
	}
	if auditor != nil {
		if err := trust.WriteKeyFile(filepath.Join(dir, trust.AuditorID+".nk"), auditor, true); err != nil {
			return nil, err
		}
	}
	if t.tmp == "" {
		cfg.hooks.Log.Info().Str("keys", dir).Msg("the run's keys and roster (asyrevel audit verify --roster " + filepath.Join(dir, "roster.json") + ")")
	}
	return t, nil
}

// runKeysDir is where Train keeps the run's keys ("" = a temporary
// folder).
func runKeysDir(cfg *job) string {
	if dir := cfg.Trust.KeysDir; dir != "" {
		return dir
	}
	if cfg.Out != "" {
		return filepath.Join(cfg.Out, "keys")
	}
	return ""
}

// readRunKeys reads back the keys Train made for the run it resumes: the
// resumed participants go on signing with them.
func readRunKeys(cfg *job) (*runTrust, error) {
	dir := runKeysDir(cfg)
	if dir == "" {
		return nil, ErrResumeTrust
	}
	r, err := trust.ReadRoster(filepath.Join(dir, "roster.json"))
	if err != nil {
		return nil, fmt.Errorf("%w: resuming needs the run's keys: %w", ErrConfig, err)
	}
	if r.Run != cfg.Run || r.Parties() != cfg.Parties {
		return nil, fmt.Errorf("%w: the keys in %s are run %s's with %d parties, not run %s's with %d", ErrConfig, dir, r.Run, r.Parties(), cfg.Run, cfg.Parties)
	}
	t := &runTrust{roster: r, keys: make(map[int]*trust.Key, cfg.Parties+1)}
	for m := 0; m <= cfg.Parties; m++ {
		id := trust.AggregatorID
		if m > 0 {
			id = trust.PartyID(m)
		}
		k, err := trust.ReadKeyFile(filepath.Join(dir, id+".nk"))
		if err != nil {
			return nil, fmt.Errorf("%w: resuming needs the run's keys: %w", ErrConfig, err)
		}
		if self, err := r.Identify(k); err != nil || self.ID != id {
			return nil, fmt.Errorf("%w: %s is not %s's key in %s", ErrConfig, filepath.Join(dir, id+".nk"), id, filepath.Join(dir, "roster.json"))
		}
		t.keys[m] = k
	}
	return t, nil
}

// readKeys reads the key and roster of participant m (0: the aggregator)
// from cfg.Trust's files; nil, nil when none are given.
func readKeys(cfg *job, m int) (*runTrust, error) {
	tc := &cfg.Trust
	if tc.Off || (tc.KeyFile == "" && tc.RosterFile == "") {
		return nil, nil
	}
	if tc.KeyFile == "" || tc.RosterFile == "" {
		return nil, fmt.Errorf("%w: --key and --roster go together", ErrConfig)
	}
	r, err := trust.ReadRoster(tc.RosterFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if r.Run != cfg.Run {
		return nil, fmt.Errorf("%w: the roster %s is run %s's, not %s's (--run)", ErrConfig, tc.RosterFile, r.Run, cfg.Run)
	}
	if r.Parties() != cfg.Parties {
		return nil, fmt.Errorf("%w: the roster %s has %d parties, the run %d (--parties)", ErrConfig, tc.RosterFile, r.Parties(), cfg.Parties)
	}
	k, err := trust.ReadKeyFile(tc.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	self, err := r.Identify(k)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrConfig, tc.KeyFile, err)
	}
	if self.Index() != m {
		want := trust.AggregatorID
		if m > 0 {
			want = trust.PartyID(m)
		}
		return nil, fmt.Errorf("%w: %s is %s's key in the roster, not %s's", ErrConfig, tc.KeyFile, self.ID, want)
	}
	return &runTrust{roster: r, keys: map[int]*trust.Key{m: k}}, nil
}

// receiptsDir is where party m writes its receipts ("" = none).
func (cfg *job) receiptsDir(m int) string {
	if cfg.trust.key(m) == nil {
		return ""
	}
	if cfg.Trust.Receipts != "" {
		return cfg.Trust.Receipts
	}
	if cfg.Out != "" {
		return filepath.Join(cfg.Out, "receipts", trust.PartyID(m))
	}
	return ""
}

// warnUntrusted says when a separate participant runs without the trust
// layer.
func warnUntrusted(cfg *job) {
	if cfg.trust == nil && !cfg.Trust.Off {
		cfg.hooks.Log.Warn().Msg("no --key and --roster: messages are neither signed nor verified (asyrevel keys makes them)")
	}
}

// serverAuth is the embedded broker's users when the trust layer is on:
// the roster's participants with trust.RunPolicy's permissions, and an
// operator for this process's own counting connection. Anonymous
// connections are then refused. nil without the trust layer.
func (n *network) serverAuth() (func(*server.Options), error) {
	t := n.cfg.trust
	if t == nil {
		return nil, nil
	}
	grants, err := t.roster.Grants(trust.RunPolicy(t.roster, true))
	if err != nil {
		return nil, fmt.Errorf("broker permissions: %w", err)
	}
	op, err := trust.GenerateKey()
	if err != nil {
		return nil, err
	}
	n.op = op
	run := t.roster.Run
	return func(o *server.Options) {
		// Made of the grants above: it cannot fail on them.
		if err := trust.ConfigureServer(o, trust.StreamName(run), grants, trust.OperatorUser(run, op.PublicKey())); err != nil {
			panic(err)
		}
	}, nil
}

// authorize makes connection name (a participant's id, or another
// connection of this process) authenticate as the roster says, use its
// own inbox and name its consumers as its permissions grant them.
func (n *network) authorize(jc *broker.JetStreamConfig, name string) {
	t := n.cfg.trust
	if t == nil {
		return
	}
	run := t.roster.Run
	if n.Server() != nil && n.op == nil {
		return // an embedded broker without users
	}
	if p, ok := t.roster.Participant(name); ok && t.key(p.Index()) != nil {
		k := t.key(p.Index())
		jc.Options = append(jc.Options, k.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(run, name)))
		jc.ConsumerName = func(filters []string) string { return trust.ConsumerPrefix(name, filters) }
		jc.LiveNew = true
		if p.Role == trust.RoleParty {
			// One consumer per filter, each named as the permissions
			// grant it (trust.DefaultConsumers), in every design: the
			// broker checks a consumer's filter only when it is alone.
			jc.SplitFilters = true
			jc.DurableName = trust.DurableName
			// Only the aggregator (or the broker's operator) may create
			// the stream: a party waits for it.
			jc.NoCreate, jc.WaitStream = true, true
			return
		}
		// Create the stream if it is missing, never change it.
		jc.CreateOnly = true
		return
	}
	if n.op != nil {
		jc.Options = append(jc.Options, n.op.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(run, trust.OperatorID)))
		jc.NoCreate = true
		return
	}
	// A separate participant's other connections (the counts at the end)
	// go as that participant.
	for m, k := range t.keys {
		id := trust.AggregatorID
		if m > 0 {
			id = trust.PartyID(m)
		}
		jc.Options = append(jc.Options, k.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(run, id)))
		jc.NoCreate = true
		return
	}
}

// RosterBroker is what a broker that serves one run of known
// participants needs (asyrevel broker --roster): Configure admits only
// the roster's participants, with trust.RunPolicy's permissions, and an
// operator; CreateStream then makes the run's stream through the
// operator (limits retention, DenyDelete, DenyPurge), so that no
// participant ever needs to create it.
type RosterBroker struct {
	Roster *trust.Roster
	// Replicas is the number of nodes that keep the run's stream (a
	// cluster's brokers); 0 means 1.
	Replicas int
	// MaxBytes bounds the run's stream (0: 80% of the disk space free
	// at the store when the stream is made; -1: no bound); MaxMsgSize
	// its largest message (0: RosterMaxMessage, the run's largest as
	// its roster tells; the server's largest payload should be the same).
	MaxBytes   int64
	MaxMsgSize int32
	op         *trust.Key
	grants     []trust.Grant
}

// NewRosterBroker prepares the users of roster r's broker.
func NewRosterBroker(r *trust.Roster) (*RosterBroker, error) {
	grants, err := r.Grants(trust.RunPolicy(r, true))
	if err != nil {
		return nil, fmt.Errorf("broker permissions: %w", err)
	}
	op, err := trust.GenerateKey()
	if err != nil {
		return nil, err
	}
	if err := trust.ConfigureServer(&server.Options{}, trust.StreamName(r.Run), grants); err != nil {
		return nil, err
	}
	return &RosterBroker{Roster: r, op: op, grants: grants}, nil
}

// Configure sets the server's users (broker.ServerConfig.Configure): the
// roster's, each auditor in an account of its own (trust.ConfigureServer),
// and the operator.
func (b *RosterBroker) Configure(o *server.Options) {
	// Checked by NewRosterBroker.
	if err := trust.ConfigureServer(o, trust.StreamName(b.Roster.Run), b.grants, trust.OperatorUser(b.Roster.Run, b.op.PublicKey())); err != nil {
		panic(err)
	}
}

// CreateStream creates the run's stream on srv if it is missing, on
// Replicas nodes.
//
// A broker of its own can be killed while the participants go on: the
// stream writes each message before it acknowledges it (synchronous
// persistence), so that it never loses what it confirmed, and the
// participants' checkpoints, which count only confirmed messages, stay
// true to it. It is bounded like the stream the embedded broker makes.
func (b *RosterBroker) CreateStream(ctx context.Context, srv *broker.Server) error {
	maxBytes, maxMsg := b.MaxBytes, b.MaxMsgSize
	if maxBytes == 0 {
		maxBytes = defaultMaxStore(srv.StoreDir())
		if jc := srv.NATS().JetStreamConfig(); jc != nil && jc.MaxStore > 0 {
			// The server reserves a stream's bound: within its own cap
			// (three quarters of the disk by default), less what its
			// other streams hold.
			maxBytes = min(maxBytes, jc.MaxStore/10*9)
		}
	} else if room, ok := diskRoom(srv.StoreDir(), 0); ok && maxBytes > room {
		maxBytes = room // never more than the disk can hold (storeBound)
	}
	if maxMsg == 0 {
		maxMsg = RosterMaxMessage(b.Roster)
	}
	bus, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{Server: srv, InProcess: true, Run: b.Roster.Run, Name: trust.OperatorID,
		Replicas: max(1, b.Replicas), CreateOnly: true, Persist: broker.PersistSync, MaxBytes: max(maxBytes, 0), MaxMsgSize: maxMsg,
		Options: []nats.Option{b.op.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(b.Roster.Run, trust.OperatorID))}})
	if err != nil {
		return fmt.Errorf("creating run %s's stream: %w", b.Roster.Run, err)
	}
	return bus.Close()
}

// CreateStreamWhenReady is CreateStream for a node of a cluster that is
// still forming: it tries again every second until the stream exists (the
// cluster elects its JetStream leader once a majority of the nodes run)
// or ctx is done, and then calls done.
func (b *RosterBroker) CreateStreamWhenReady(ctx context.Context, srv *broker.Server, done func(error)) {
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := b.CreateStream(actx, srv)
		cancel()
		if err == nil || ctx.Err() != nil {
			done(err)
			return
		}
		select {
		case <-ctx.Done():
			done(ctx.Err())
			return
		case <-time.After(time.Second):
		}
	}
}
