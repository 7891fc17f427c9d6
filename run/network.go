package run

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// network is the broker a run talks through (broker.Network), with what
// the run adds to it: the store's bound, the roster's users and
// credentials, the run's checks of a connection.
type network struct {
	*broker.Network
	cfg *job
	// store is the embedded broker's store when it outlives the run ("":
	// a temporary one, or an external broker); external the external
	// broker's URL.
	store, external string
	op              *trust.Key // the operator's key, when the embedded broker admits only the roster (trust.go)
}

// DefaultBrokerWait is how long a participant of the command line waits
// for its broker by default (Config.BrokerWait).
const DefaultBrokerWait = 10 * time.Minute

// openNetwork starts cfg's broker (broker.OpenNetwork): the memory bus,
// an external broker (Config.NATS), or the embedded server or cluster
// with its store, its stream's bound (Config.MaxStore) and, with the
// trust layer, the roster's users.
func openNetwork(ctx context.Context, cfg *job) (*network, error) {
	n := &network{cfg: cfg}
	persist, err := cfg.persist()
	if err != nil {
		return nil, err
	}
	compression, err := cfg.compression()
	if err != nil {
		return nil, err
	}
	nc := broker.NetworkConfig{
		Memory: cfg.Bus == "memory", URL: cfg.NATS, Cluster: cfg.Cluster, InProcess: cfg.InProcess, ClusterURLs: cfg.ClusterURLs,
		Run: cfg.Run, Design: broker.Design(cfg.Design), Persist: persist, Compression: compression,
		MaxMsgSize: withMargin(largestMessage(cfg)), Wait: cfg.BrokerWait, Log: &cfg.hooks.Log,
	}
	switch {
	case nc.Memory:
	case nc.URL != "":
		n.external = cfg.NATS
		if cfg.TLS.Enabled() {
			var tc *tls.Config
			if tc, err = trust.ClientTLS(cfg.TLS, ""); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrConfig, err)
			}
			nc.TLS = tc
		}
	default:
		dir := cfg.StoreDir
		switch {
		case dir == "" && cfg.Out != "":
			// Train made room for its run there (keepEarlier); a resume
			// reads the run's stream there.
			dir = storeIn(cfg.Out)
		case dir != "":
			if st, err := OpenStore(dir); err == nil && len(st.Runs) > 0 {
				cfg.hooks.Log.Info().Str("store", dir).Int("runs", len(st.Runs)).Str("size", MB(st.Bytes)).
					Msg("the store holds earlier runs (asyrevel store list, asyrevel store rm)")
			}
		}
		// "" is a temporary store (broker.NetworkConfig.Dir), on the
		// file system of the temporary folder.
		nc.Dir, n.store = dir, dir
		nc.MaxBytes = storeBound(cmp.Or(dir, os.TempDir()), cfg.Run, cfg.MaxStore, cfg.Resume, cfg.hooks.Log)
		if nc.Configure, err = n.serverAuth(); err != nil {
			return nil, err
		}
		nc.MaxPayload = withMargin(largestMessage(cfg))
		if cfg.Cluster == 0 && dir != "" && cfg.Resume && (nc.MaxBytes > 0 || cfg.MaxStore < 0) {
			if err := raiseBound(ctx, cfg, dir, nc.MaxBytes); err != nil {
				return nil, err
			}
		}
	}
	if n.Network, err = broker.OpenNetwork(ctx, nc); err != nil {
		return nil, err
	}
	return n, nil
}

// isParticipant reports whether a connection's name is a participant's
// (the aggregator's, a party's) rather than another connection of the
// process (the counts at the end, an audit).
func isParticipant(name string) bool {
	return name == trust.AggregatorID || strings.HasPrefix(name, "party-")
}

// connect makes connection name to the broker: a participant's (its id)
// waits for the broker (Config.BrokerWait), authenticates as the roster
// says (trust.go), and is refused at once if the broker cannot carry the
// run's largest message (checkRoom).
func (n *network) connect(ctx context.Context, name string) (broker.Bus, error) {
	participant := isParticipant(name)
	d := broker.Dial{
		Name: name, Participant: participant,
		// A participant that heals itself stops publishing when its
		// connection drops, and resumes (heal.go).
		EndOnLoss: n.cfg.heal != nil && participant,
		Authorize: func(jc *broker.JetStreamConfig) { n.authorize(jc, name) },
	}
	if n.cfg.hooks.PartyURL != nil {
		var m int
		if _, err := fmt.Sscanf(name, "party-%d", &m); err == nil {
			d.URL = n.cfg.hooks.PartyURL(m)
		}
	}
	b, err := n.Connect(ctx, d)
	if err != nil {
		return nil, err
	}
	if js, ok := b.(*broker.JetStream); ok && participant {
		// A run that the broker cannot carry stops now, not midway.
		if err := checkRoom(ctx, js, n.cfg); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// close stops the broker the run started (broker.Network.Close).
func (n *network) close() { n.Close() }

// counts reads back how many messages of each kind the run's stream holds
// and, from a JetStream broker, the stream's size in bytes.
func (n *network) counts(ctx context.Context, run string) (*StreamCounts, uint64, error) {
	b, err := n.connect(ctx, "audit")
	if err != nil {
		return nil, 0, err
	}
	defer b.Close()
	var c StreamCounts
	for _, f := range []struct {
		k schemas.Kind
		p *uint64
	}{{schemas.KindHello, &c.Hello}, {schemas.KindOutput, &c.Outputs}, {schemas.KindReply, &c.Replies}, {schemas.KindEval, &c.Evals}, {schemas.KindControl, &c.Control}} {
		v, err := b.Count(ctx, schemas.Filter(run, f.k))
		if err != nil {
			return nil, 0, fmt.Errorf("counting the stream: %w", err)
		}
		*f.p = v
	}
	if c.Receipts, err = b.Count(ctx, "asyrevel."+run+".rcpt.*"); err != nil {
		return nil, 0, fmt.Errorf("counting the stream: %w", err)
	}
	var size uint64
	if js, ok := b.(*broker.JetStream); ok {
		if st, err := jetstream.New(js.Conn()); err == nil {
			if s, err := st.Stream(ctx, broker.StreamName(run)); err == nil {
				if info, err := s.Info(ctx); err == nil {
					size = info.State.Bytes
				}
			}
		}
	}
	return &c, size, nil
}

// raiseBound lifts the bound of a resumed run's stream in the store at
// dir to max bytes (--max-store, or by default what the store holds plus
// 80% of the free space), never lowering it, so that a run that stopped
// with its stream full, or its disk full, goes on once there is room
// (broker.RaiseStreamBound).
func raiseBound(ctx context.Context, cfg *job, dir string, max int64) error {
	before, raised, err := broker.RaiseStreamBound(ctx, dir, cfg.Run, max, withMargin(largestMessage(cfg)))
	if raised {
		cfg.hooks.Log.Info().Int64("from_bytes", before).Int64("to_bytes", max).
			Msg("resume: the run's stream may hold more than before (--max-store, or more free disk space)")
	}
	return err
}
