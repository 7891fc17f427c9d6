package serve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/trust"
)

// NetConfig says which broker scoring talks through.
type NetConfig struct {
	// Bus is jetstream (default) or memory (in-process, no broker).
	Bus string
	// NATS is an external broker's URL ("" = an embedded JetStream server
	// on loopback).
	NATS string
	// Store keeps the embedded broker's store (the scoring log) in this
	// folder ("" = a temporary one, removed at Close).
	Store string
	// InProcess connects to the embedded server in-process instead of
	// over TCP loopback.
	InProcess bool
	// Run names the stream (ASYREVEL_<run>) that records the messages.
	Run string
	Log zerolog.Logger
}

// Network is the broker of a scoring process.
type Network struct {
	Name string // memory, jetstream-tcp, jetstream-inprocess, jetstream-external
	cfg  NetConfig
	hub  *broker.MemoryHub
	srv  *broker.Server
	tmp  string
}

// OpenNetwork starts (or names) the broker of cfg.
func OpenNetwork(ctx context.Context, cfg NetConfig) (*Network, error) {
	n := &Network{cfg: cfg}
	switch {
	case cfg.Bus == "memory":
		n.Name, n.hub = "memory", broker.NewMemoryHub()
		return n, nil
	case cfg.Bus != "" && cfg.Bus != "jetstream":
		return nil, fmt.Errorf("%w: --bus %q: want jetstream or memory", ErrMismatch, cfg.Bus)
	case cfg.NATS != "":
		n.Name = "jetstream-external"
		return n, nil
	}
	dir := cfg.Store
	if dir == "" {
		tmp, err := os.MkdirTemp("", "asyrevel-score-")
		if err != nil {
			return nil, err
		}
		n.tmp, dir = tmp, tmp
	}
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir})
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("starting the embedded broker: %w", err)
	}
	n.srv, n.Name = srv, "jetstream-tcp"
	if cfg.InProcess {
		n.Name = "jetstream-inprocess"
	}
	return n, nil
}

// URL is the broker's URL ("" for the memory bus).
func (n *Network) URL() string {
	if n.srv != nil {
		return n.srv.URL()
	}
	return n.cfg.NATS
}

// Connect opens a connection named name.
func (n *Network) Connect(ctx context.Context, name string, key *trust.Key) (broker.Bus, error) {
	if n.hub != nil {
		return n.hub.Connect(name), nil
	}
	jc := broker.JetStreamConfig{URL: n.cfg.NATS, Server: n.srv, InProcess: n.cfg.InProcess && n.srv != nil, Run: n.cfg.Run, Name: name, Logger: &n.cfg.Log}
	if n.srv != nil {
		jc.URL = ""
	}
	plain := jc
	if key != nil && n.srv == nil {
		// An external broker that admits the roster's users: each on its
		// key, with its own inbox (the only one it may read).
		jc.Options = append(jc.Options, key.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(n.cfg.Run, name)))
		jc.LiveNew = true // scoring subscribes to what comes next only: core subscriptions
		if name == trust.AggregatorID {
			jc.CreateOnly = true // make the run's stream if missing, never change it
		} else {
			jc.NoCreate, jc.WaitStream = true, true // only the aggregator makes the stream
		}
	}
	b, err := broker.ConnectJetStream(ctx, jc)
	if key != nil && n.srv == nil && err != nil {
		b, err = broker.ConnectJetStream(ctx, plain)
	}
	if err != nil {
		return nil, fmt.Errorf("connecting %s to the broker: %w", name, err)
	}
	return b, nil
}

// ConnectVia opens a connection named name to the broker at url instead
// of the network's own address: through a proxy in front of it (a slow
// link to one participant, package internal/wan).
func (n *Network) ConnectVia(ctx context.Context, name string, key *trust.Key, url string) (broker.Bus, error) {
	if n.hub != nil {
		return nil, fmt.Errorf("%w: the memory bus has no address to connect through", ErrMismatch)
	}
	jc := broker.JetStreamConfig{URL: url, Run: n.cfg.Run, Name: name, Logger: &n.cfg.Log}
	if n.srv == nil && key != nil {
		jc.Options = append(jc.Options, key.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(n.cfg.Run, name)))
		jc.LiveNew, jc.NoCreate, jc.WaitStream = true, true, true
	}
	b, err := broker.ConnectJetStream(ctx, jc)
	if err != nil {
		return nil, fmt.Errorf("connecting %s to the broker through %s: %w", name, url, err)
	}
	return b, nil
}

// Close stops the embedded broker and removes a temporary store.
func (n *Network) Close() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv = nil
	}
	if n.tmp != "" {
		os.RemoveAll(n.tmp)
		n.tmp = ""
	}
}

// Keys are a run's keys as asyrevel train or asyrevel keys wrote them: the
// roster and the participants' secret keys found in the folder.
type Keys struct {
	Roster *trust.Roster
	byID   map[int]*trust.Key
}

// Key is participant m's key (0: the aggregator), nil if the folder lacks
// it or k is nil.
func (k *Keys) Key(m int) *trust.Key {
	if k == nil {
		return nil
	}
	return k.byID[m]
}

// RosterOrNil is the roster, nil without keys.
func (k *Keys) RosterOrNil() *trust.Roster {
	if k == nil {
		return nil
	}
	return k.Roster
}

// LoadKeys reads DIR/roster.json and every participant's DIR/ID.nk that
// exists. A folder without a roster gives nil, nil.
func LoadKeys(dir string) (*Keys, error) {
	r, err := trust.ReadRoster(filepath.Join(dir, "roster.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	k := &Keys{Roster: r, byID: map[int]*trust.Key{}}
	for m := 0; m <= r.Parties(); m++ {
		id := trust.AggregatorID
		if m > 0 {
			id = trust.PartyID(m)
		}
		key, err := trust.ReadKeyFile(filepath.Join(dir, id+".nk"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if self, err := r.Identify(key); err != nil || self.ID != id {
			return nil, fmt.Errorf("%w: %s is not %s's key in the roster", ErrSignature, filepath.Join(dir, id+".nk"), id)
		}
		k.byID[m] = key
	}
	return k, nil
}

// PartyKeys reads party m's key file and the run's roster.
func PartyKeys(keyFile, rosterFile string, m int) (*Keys, error) {
	r, err := trust.ReadRoster(rosterFile)
	if err != nil {
		return nil, err
	}
	key, err := trust.ReadKeyFile(keyFile)
	if err != nil {
		return nil, err
	}
	if self, err := r.Identify(key); err != nil || self.Index() != m {
		return nil, fmt.Errorf("%w: %s is not participant %d's key in %s", ErrSignature, keyFile, m, rosterFile)
	}
	return &Keys{Roster: r, byID: map[int]*trust.Key{m: key}}, nil
}
