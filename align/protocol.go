package align

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// Protocol errors callers may branch on.
var (
	// ErrPeer reports a peer that broke the protocol: a malformed or
	// out-of-order message, a wrong length, a non-group element, another
	// key specification. The error names the peer.
	ErrPeer = errors.New("align: peer broke the protocol")
	// ErrTimeout reports a peer that sent nothing (not even a heartbeat)
	// for Config.Timeout: it left or hangs.
	ErrTimeout = errors.New("align: peer went silent")
	// ErrAborted reports a peer that gave up and said why.
	ErrAborted = errors.New("align: peer aborted")
	// ErrConfig reports an unusable Config.
	ErrConfig = errors.New("align: bad configuration")
	// ErrOversize reports a party whose stated set is larger than the
	// hub's bound (Config.MaxRatio times the hub's own set): the hub
	// refuses it before it sends anything of its own set.
	ErrOversize = errors.New("align: a party's set exceeds the hub's bound")
)

// Defaults of a Config.
const (
	DefaultTimeout = 2 * time.Minute
	// ChunkItems is how many items one message carries: 512 KiB of
	// elements, under a stock NATS server's 1 MB payload limit.
	ChunkItems = 1 << 14
	// DefaultMaxRatio bounds a party's set at 4 times the hub's.
	DefaultMaxRatio = 4
)

// Bound is the largest set a party may state against a hub of n keys with
// ratio r (r < 0: no bound, -1 returned): floor(r * n), at least 1.
//
// The bound scales with the hub's set and has no floor on purpose: a
// party learns which of its keys the hub holds (with one party, exactly
// the hub's keys among those it tests), so the number of keys it may test
// is what bounds how much of the hub's list it can learn, and a small hub
// list is where each tested key reveals the most. A hub of 10 keys under a
// floor of 1,000 would let a party test 1,000 candidates and learn all
// 10. A small hub that must align with a much larger party raises the
// ratio knowingly (every organisation agreeing); the log records it.
func Bound(r float64, n int) int {
	if r < 0 {
		return -1
	}
	return max(1, int(math.Floor(r*float64(n))))
}

// Config is one organisation's part in an alignment.
type Config struct {
	Run string
	// ID is the organisation: 0 the hub (the aggregator, which holds the
	// labels), m = 1..Parties party m.
	ID      int
	Parties int // q, the number of parties besides the hub
	Bus     broker.Bus
	// Roster and Key are the run's roster and this organisation's key:
	// every message is signed and every message received is verified.
	Roster *trust.Roster
	Key    *trust.Key
	// Spec is the key specification (Spec); every organisation must give
	// the same.
	Spec string
	// Width is the number of feature columns this organisation holds
	// (the hub learns the parties' widths to lay out the joint columns).
	Width int
	// Labels (the hub only, optional) are the label of each of its rows:
	// the hub tells the parties how many classes the intersection's rows
	// have (Result.Classes), which their models' shapes depend on.
	Labels []float64
	// MaxRatio (the hub only) bounds each party's set at
	// Bound(MaxRatio, hub's set size): a party states its size first, and
	// the hub refuses one over the bound (ErrOversize) before it sends
	// anything of its own set. 0 means DefaultMaxRatio; a negative ratio
	// means no bound (the hub logs it at Warn).
	MaxRatio float64
	// Timeout is how long to wait for a peer that sends nothing; 0 means
	// DefaultTimeout. Heartbeats (every Timeout/8) keep a slow but live
	// peer from being taken for gone.
	Timeout time.Duration
	Log     zerolog.Logger
	// Progress, if set, is updated as the alignment goes (read it from
	// another goroutine).
	Progress *Progress
}

// Progress counts an organisation's work; safe to read concurrently.
type Progress struct {
	Hashed   atomic.Int64 // own keys hashed and masked
	Masked   atomic.Int64 // peers' elements raised to the own scalar
	Received atomic.Int64 // items received
	Sent     atomic.Int64 // items sent
	Matched  atomic.Bool  // the hub has matched; results are on their way
}

// Result is what an organisation learns.
type Result struct {
	// Rows are the organisation's own rows (indices into its keys) of the
	// intersection, in the common order.
	Rows []int
	// Lo is this organisation's first column in the joint feature set,
	// Features the joint width and Parties q (a party learns them from the
	// hub; the hub computes them).
	Lo, Features, Parties int
	// Widths are the parties' widths in order, and Classes the number of
	// distinct labels of the intersection's rows (0: the hub was given no
	// labels); the hub computes them and tells every party (the layout a
	// split folder's manifest holds).
	Widths  []int
	Classes int
	// Sizes: own set, the hub's set (parties), every party's set (hub).
	Own, HubSize int
	PartySizes   []int
	// MaxRatio and MaxParty are the hub's bound on a party's set: the
	// ratio and the size it allowed (-1: no bound). The hub's only.
	MaxRatio float64
	MaxParty int
	Stats    Stats
}

// Stats are an organisation's costs.
type Stats struct {
	Seconds       float64 `json:"seconds"`
	MessagesSent  int64   `json:"messages_sent"`
	BytesSent     int64   `json:"bytes_sent"` // payload, subject and headers
	MessagesRecv  int64   `json:"messages_received"`
	BytesRecv     int64   `json:"bytes_received"`
	Rejected      int64   `json:"rejected"` // messages the trust layer refused
	HashSeconds   float64 `json:"hash_seconds"`
	MaskSeconds   float64 `json:"mask_seconds"`
	MatchSeconds  float64 `json:"match_seconds"`
	HeartbeatsOut int64   `json:"heartbeats_sent"`
}

func (c *Config) check() error {
	switch {
	case c.Bus == nil:
		return fmt.Errorf("%w: no bus", ErrConfig)
	case c.Roster == nil || c.Key == nil:
		return fmt.Errorf("%w: alignment needs the run's roster and this organisation's key", ErrConfig)
	case c.Roster.Run != c.Run:
		return fmt.Errorf("%w: the roster is run %s's, not %s's", ErrConfig, c.Roster.Run, c.Run)
	case c.Parties < 1 || c.Parties != c.Roster.Parties():
		return fmt.Errorf("%w: %d parties, the roster has %d", ErrConfig, c.Parties, c.Roster.Parties())
	case c.ID < 0 || c.ID > c.Parties:
		return fmt.Errorf("%w: organisation %d of 0..%d", ErrConfig, c.ID, c.Parties)
	case c.Spec == "":
		return fmt.Errorf("%w: no key specification", ErrConfig)
	case math.IsNaN(c.MaxRatio) || math.IsInf(c.MaxRatio, 0):
		return fmt.Errorf("%w: max ratio %v", ErrConfig, c.MaxRatio)
	}
	if c.MaxRatio == 0 {
		c.MaxRatio = DefaultMaxRatio
	}
	self, err := c.Roster.Identify(c.Key)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if self.Index() != c.ID {
		return fmt.Errorf("%w: the key is %s's, not %s's", ErrConfig, self.ID, orgName(c.ID))
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Progress == nil {
		c.Progress = new(Progress)
	}
	return nil
}

// orgName is organisation m's participant id.
func orgName(m int) string {
	if m == 0 {
		return trust.AggregatorID
	}
	return trust.PartyID(m)
}

// Run aligns keys (this organisation's normalised, distinct keys) with
// the other organisations of the run and returns what this organisation
// learns. Every organisation calls it at about the same time (a peer that
// is not there within Timeout is an error); the hub (ID 0) first.
func Run(ctx context.Context, cfg Config, keys []string) (*Result, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys", ErrConfig)
	}
	if len(keys) > 1<<31 {
		return nil, fmt.Errorf("%w: %d keys, at most 2^31", ErrConfig, len(keys))
	}
	o, err := newOrg(ctx, &cfg, len(keys))
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	var res *Result
	if cfg.ID == 0 {
		res, err = o.hub(keys)
	} else {
		res, err = o.party(keys)
	}
	o.close(err)
	if err != nil {
		return nil, err
	}
	res.Own = len(keys)
	res.Stats = o.stats
	res.Stats.Seconds = time.Since(t0).Seconds()
	res.Stats.MessagesSent, res.Stats.BytesSent = o.msgsOut.Load(), o.bytesOut.Load()
	res.Stats.MessagesRecv, res.Stats.BytesRecv = o.msgsIn.Load(), o.bytesIn.Load()
	res.Stats.Rejected = o.rejected.Load()
	res.Stats.HeartbeatsOut = o.beats.Load()
	return res, nil
}

// event is a verified message from a peer, or why a peer failed.
type event struct {
	from int
	msg  *schemas.AlignMsg
	err  error
}

// org is one organisation's running alignment.
type org struct {
	cfg    *Config
	ctx    context.Context
	cancel context.CancelFunc
	dst    []byte
	sec    secret
	perm   []int // shuffled position -> own row

	out *trust.Outbox
	ver *trust.Verifier
	sub broker.Subscription

	sendMu sync.Mutex
	pubs   map[int]*trust.Publisher // by peer: the subject this org sends to it on
	buf    []byte
	sent   time.Time // last send

	qmu    sync.Mutex
	queue  []event
	notify chan struct{}

	msgsOut, bytesOut, msgsIn, bytesIn, rejected, beats atomic.Int64
	stats                                               Stats
	hbDone                                              chan struct{}
	hbWG                                                sync.WaitGroup
}

func newOrg(ctx context.Context, cfg *Config, n int) (*org, error) {
	out, err := trust.NewOutbox(cfg.Roster, cfg.Key, trust.Policy{})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	o := &org{cfg: cfg, out: out, pubs: map[int]*trust.Publisher{}, notify: make(chan struct{}, 1),
		dst: hashDST(cfg.Run, cfg.Spec), sec: newSecret(), hbDone: make(chan struct{})}
	o.ctx, o.cancel = context.WithCancel(ctx)
	var in, filters []string
	if cfg.ID == 0 {
		for m := 1; m <= cfg.Parties; m++ {
			in = append(in, schemas.AlignSubject(cfg.Run, m))
			if o.pubs[m], err = out.Publisher(schemas.AlignHubSubject(cfg.Run, m)); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrConfig, err)
			}
		}
		filters = []string{"asyrevel." + cfg.Run + "." + schemas.AlignToken + ".*"}
	} else {
		in = []string{schemas.AlignHubSubject(cfg.Run, cfg.ID)}
		if o.pubs[0], err = out.Publisher(schemas.AlignSubject(cfg.Run, cfg.ID)); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		filters = in
	}
	if o.ver, err = trust.NewVerifier(cfg.Roster, trust.VerifierOptions{Subjects: in}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	// A random order of the own rows: elements go out in it.
	var seed [32]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, err
	}
	rng := mrand.New(mrand.NewChaCha8(seed))
	o.perm = rng.Perm(n)
	o.sub, err = cfg.Bus.Subscribe(o.ctx, filters, broker.SubscribeOptions{Deliver: broker.DeliverAll}, o.handle)
	if err != nil {
		o.cancel()
		return nil, fmt.Errorf("align: %s subscribing: %w", orgName(cfg.ID), err)
	}
	o.sent = time.Now()
	o.hbWG.Add(1)
	go o.heartbeat()
	return o, nil
}

// close stops the heartbeats and the subscription; on failure it tells the
// peers why.
func (o *org) close(err error) {
	close(o.hbDone)
	o.hbWG.Wait()
	if err != nil && !errors.Is(err, ErrAborted) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(o.ctx), 2*time.Second)
		reason := err.Error()
		if len(reason) > 1000 {
			reason = reason[:1000]
		}
		for peer := range o.pubs {
			_ = o.send(ctx, peer, &schemas.AlignMsg{Phase: schemas.AlignAbort, Reason: reason})
		}
		_ = o.cfg.Bus.Flush(ctx)
		cancel()
	} else {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(o.ctx), 30*time.Second)
		_ = o.cfg.Bus.Flush(ctx)
		cancel()
	}
	o.sub.Close()
	o.cancel()
}

// heartbeat sends an AlignAlive to every peer when nothing was sent for
// Timeout/8.
func (o *org) heartbeat() {
	defer o.hbWG.Done()
	every := o.cfg.Timeout / 8
	t := time.NewTicker(every / 2)
	defer t.Stop()
	for {
		select {
		case <-o.hbDone:
			return
		case <-o.ctx.Done():
			return
		case <-t.C:
			o.sendMu.Lock()
			idle := time.Since(o.sent) >= every
			o.sendMu.Unlock()
			if idle {
				for peer := range o.pubs {
					if o.send(o.ctx, peer, &schemas.AlignMsg{Phase: schemas.AlignAlive}) == nil {
						o.beats.Add(1)
					}
				}
			}
		}
	}
}

// send signs and publishes m to peer.
func (o *org) send(ctx context.Context, peer int, m *schemas.AlignMsg) error {
	o.sendMu.Lock()
	defer o.sendMu.Unlock()
	pub := o.pubs[peer]
	party := peer
	if o.cfg.ID != 0 {
		party = o.cfg.ID
	}
	m.Header = schemas.Header{Version: schemas.Version, Party: uint16(party), Seq: pub.Next()}
	data, err := schemas.MarshalAlign(o.buf[:0], m)
	if err != nil {
		return err
	}
	o.buf = data
	st := pub.Append(data, true)
	hdr := map[string]string{trust.SigHeader: st.SigHeader(), trust.PrevHeader: string(st.AppendPrevHeader(nil))}
	msg := &broker.Message{Subject: pub.Subject(), Header: hdr, Data: data}
	if err := o.cfg.Bus.Publish(ctx, msg); err != nil {
		return fmt.Errorf("align: %s publishing on %s: %w", orgName(o.cfg.ID), pub.Subject(), err)
	}
	n := len(data) + len(msg.Subject)
	for k, v := range hdr {
		n += len(k) + len(v)
	}
	o.msgsOut.Add(1)
	o.bytesOut.Add(int64(n))
	o.sent = time.Now()
	return nil
}

// sendItems sends a phase of items (each size bytes) to peer in chunks.
func (o *org) sendItems(peer int, phase schemas.AlignPhase, items []byte, size int, tmpl schemas.AlignMsg) error {
	total := len(items) / size
	for off := 0; off < total || (off == 0 && total == 0); off += ChunkItems {
		m := tmpl
		m.Phase, m.Total, m.Offset = phase, uint64(total), uint64(off)
		m.Data = items[off*size : min(off+ChunkItems, total)*size]
		if err := o.send(o.ctx, peer, &m); err != nil {
			return err
		}
		o.cfg.Progress.Sent.Add(int64(m.Items()))
		if total == 0 {
			break
		}
	}
	return nil
}

// handle checks a delivery (signature and chain first, then the form) and
// queues it for the main loop. It never blocks.
func (o *org) handle(_ context.Context, d broker.Delivery) {
	from := o.cfg.Roster.Owner(d.Subject())
	if from == nil {
		o.rejected.Add(1)
		return
	}
	data := d.Data()
	seq := alignSeq(data)
	vm := trust.Msg{StreamSeq: d.Seq(), Subject: d.Subject(), Seq: seq, Payload: data,
		Sig: d.Header(trust.SigHeader), Prev: d.Header(trust.PrevHeader)}
	if err := o.ver.Verify(&vm); err != nil {
		// Not proven to come from the subject's owner: counted, not
		// held against the peer.
		o.rejected.Add(1)
		o.cfg.Log.Warn().Str("subject", d.Subject()).Str("reason", trust.Reason(err)).Err(err).Msg("align: rejected message")
		return
	}
	o.msgsIn.Add(1)
	o.bytesIn.Add(int64(len(data) + len(d.Subject()) + len(vm.Sig) + len(vm.Prev)))
	ev := event{from: from.Index()}
	m, err := schemas.UnmarshalAlign(data)
	switch {
	case err != nil:
		ev.err = fmt.Errorf("%w: %s sent a malformed message (seq %d): %w", ErrPeer, from.ID, seq, err)
	case int(m.Party) != o.subjectParty(d.Subject()):
		ev.err = fmt.Errorf("%w: %s's message on %s says party %d", ErrPeer, from.ID, d.Subject(), m.Party)
	default:
		ev.msg = m
	}
	o.push(ev)
}

// subjectParty is the party a psi or psih subject names.
func (o *org) subjectParty(subject string) int {
	i := len(subject) - 1
	for i >= 0 && subject[i] != '.' {
		i--
	}
	m, _ := strconv.Atoi(subject[i+1:])
	return m
}

// alignSeq reads the sequence number from the head of an AlignMsg (the
// version, party and seq fields); 0 when it cannot, which the verifier
// refuses.
func alignSeq(data []byte) uint64 { return schemas.AlignSeqHead(data) }

// next waits for the next event. waiting lists the peers still owing
// something, with what; a peer silent for Timeout is an error.
func (o *org) next(lastSeen map[int]time.Time, waiting func(peer int) string) (event, error) {
	tick := time.NewTicker(min(o.cfg.Timeout/4, time.Second))
	defer tick.Stop()
	for {
		o.qmu.Lock()
		if len(o.queue) > 0 {
			ev := o.queue[0]
			o.queue[0] = event{}
			o.queue = o.queue[1:]
			o.qmu.Unlock()
			lastSeen[ev.from] = time.Now()
			return ev, nil
		}
		o.qmu.Unlock()
		select {
		case <-o.ctx.Done():
			return event{}, fmt.Errorf("align: %s: %w", orgName(o.cfg.ID), o.ctx.Err())
		case <-o.notify:
		case <-tick.C:
			for peer, t := range lastSeen {
				what := waiting(peer)
				if what != "" && time.Since(t) > o.cfg.Timeout {
					return event{}, fmt.Errorf("%w: %s sent nothing for %s while %s waited for %s (it left, or hangs)",
						ErrTimeout, orgName(peer), o.cfg.Timeout, orgName(o.cfg.ID), what)
				}
			}
		}
	}
}

// phaseIn collects one phase's chunks from one peer, in order.
type phaseIn struct {
	total int
	got   int
	data  []byte
	begun bool
}

func (p *phaseIn) done() bool { return p.begun && p.got == p.total }

// add checks that chunk m continues the phase and appends its data.
func (p *phaseIn) add(from int, m *schemas.AlignMsg, limit int) error {
	if !p.begun {
		if m.Offset != 0 {
			return fmt.Errorf("%w: %s's %s starts at item %d, not 0", ErrPeer, orgName(from), m.Phase, m.Offset)
		}
		if limit >= 0 && int(m.Total) != limit {
			return fmt.Errorf("%w: %s's %s has %d items, want %d", ErrPeer, orgName(from), m.Phase, m.Total, limit)
		}
		p.begun, p.total = true, int(m.Total)
		p.data = make([]byte, 0, p.total*m.Phase.ItemSize())
	}
	if int(m.Total) != p.total || int(m.Offset) != p.got {
		return fmt.Errorf("%w: %s's %s chunk at item %d of %d, want item %d of %d", ErrPeer, orgName(from), m.Phase, m.Offset, m.Total, p.got, p.total)
	}
	if m.Items() == 0 && p.total > 0 {
		return fmt.Errorf("%w: %s's %s chunk is empty", ErrPeer, orgName(from), m.Phase)
	}
	p.data = append(p.data, m.Data...)
	p.got += m.Items()
	return nil
}

// common handles what any message may be: an abort, a heartbeat.
func common(ev event) (skip bool, err error) {
	if ev.err != nil {
		return false, ev.err
	}
	switch ev.msg.Phase {
	case schemas.AlignAbort:
		return false, fmt.Errorf("%w: %s: %s", ErrAborted, orgName(ev.from), ev.msg.Reason)
	case schemas.AlignAlive:
		return true, nil
	}
	return false, nil
}

// u32 appends v as a little-endian uint32.
func u32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }

func leU32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
