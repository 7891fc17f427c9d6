package adversary

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// Category is one kind of bad message a rogue sends, and what became
// of them: refused by the broker, rejected (and counted) by their
// receiver, or accepted.
type Category struct {
	Name    string
	Sent    int64
	Refused int64 // by the broker
	// Rejected by the receiver: filled from the run's summary, under the
	// receiver's reasons.
	Rejected int64
	reasons  []string // summary.json rejection keys of this category
	// what the rogue does
	how string
	// fromLog: its fate is read from the log after the run (settleLog):
	// what the stream did not store was refused, what it stored is
	// listed apart by the audit (a server's answer is nobody's signed
	// message).
	fromLog bool
}

// Accepted is what neither the broker nor the receiver stopped.
func (c *Category) Accepted() int64 { return c.Sent - c.Refused - c.Rejected }

// Rogue is a malicious client of a run with the trust layer on: it holds
// party 1's key (a compromised or dishonest participant) and tries what
// the adversary does, on the run's real broker.
type Rogue struct {
	url, run string
	key      *trust.Key // party 1's
	auditor  *trust.Key // the run's auditor's (nil: none)
	parties  int
	scale    int // messages per category (at least 1)

	mu        sync.Mutex
	refusals  []string
	cats      []*Category
	byName    map[string]*Category
	codec     *schemas.Codec
	unknowKey *trust.Key
	injectAt  []string // the reply subjects of the injection
	relayAt   []string // the reply subjects of the pull relay
	auditAt   []string // the reply subjects of the auditor's requests
}

func newRogue(url, run string, key, auditor *trust.Key, parties, scale int) (*Rogue, error) {
	k, err := trust.GenerateKey()
	if err != nil {
		return nil, err
	}
	r := &Rogue{url: url, run: run, key: key, auditor: auditor, parties: parties, scale: max(scale, 1), byName: map[string]*Category{}, codec: schemas.NewCodec(), unknowKey: k}
	for _, c := range []*Category{
		{Name: "anonymous-connection", how: "connect without a key"},
		{Name: "other-party-subject", how: "publish on another party's or the aggregator's subjects (forged outputs, replies, controls)"},
		{Name: "read-others", how: "subscribe to another party's replies, to the run, to everything"},
		{Name: "stream-admin", how: "delete, purge, limit the stream; delete or get a message; an unfiltered consumer or one on another party's replies"},
		{Name: "junk", how: "random bytes on its own output subject", reasons: []string{"decode", "version", "shape", "range", "party", "other"}},
		{Name: "unsigned-jump", how: "well-formed outputs whose sequence numbers jump ahead, unsigned", reasons: []string{"trust-gap"}},
		{Name: "replay", how: "well-formed outputs that reuse sequence numbers already used", reasons: []string{"trust-replay"}},
		{Name: "forged-signature", how: "hellos with the next sequence number and a forged signature", reasons: []string{"trust-bad_signature"}},
		{Name: "unknown-key", how: "hellos signed with a key that is not in the roster", reasons: []string{"trust-unknown_key"}},
		{Name: "unsigned-hello", how: "hellos without a signature (every hello must be signed)", reasons: []string{"trust-unsigned"}},
		{Name: "reply-to-injection", how: "JetStream API requests it may make (stream info) whose reply subject lies in the run: the server's answers on the control, another party's and a new subject", fromLog: true},
		{Name: "pull-relay", how: "next-message requests to a consumer it may make (its own replies) whose reply subject lies in the run: the server delivers copies of genuine signed messages there (its own reply subject and the control subject)", fromLog: true},
		{Name: "oversized", how: "4 MB messages on its own output subject (the run's largest is far smaller)"},
		{Name: "oversize-near", how: "messages of 1,046,576 bytes (just under the embedded broker's former bound of 1 MiB) on its own output subject: the run's largest is tens of KiB"},
		{Name: "auditor-reply-to", how: "the run's auditor key's stream info and direct get requests whose reply subject lies in the run (the last party's reply subject, a new subject): its own account's, where the run's stream is not", fromLog: true},
	} {
		r.cats = append(r.cats, c)
		r.byName[c.Name] = c
	}
	return r, nil
}

func (r *Rogue) conn() (*nats.Conn, error) {
	return nats.Connect(r.url, r.key.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(r.run, "party-1")),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			r.mu.Lock()
			r.refusals = append(r.refusals, fmt.Sprintf("disconnected: %v", err))
			r.mu.Unlock()
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			r.mu.Lock()
			r.refusals = append(r.refusals, err.Error())
			r.mu.Unlock()
		}))
}

func (r *Rogue) subject(k schemas.Kind, m int) string { return schemas.Subject(r.run, k, m) }

// attack sends everything; the broker's refusals of publishes and
// subscriptions arrive asynchronously and are counted at the end.
func (r *Rogue) attack(ctx context.Context) error {
	n := r.scale
	nc, err := r.conn()
	if err != nil {
		return fmt.Errorf("rogue: %w", err)
	}
	defer nc.Close()
	// Other subjects.
	other := r.byName["other-party-subject"]
	targets := []string{r.subject(schemas.KindOutput, 2), r.subject(schemas.KindReply, 1), r.subject(schemas.KindControl, 0),
		r.subject(schemas.KindHello, 2), r.subject(schemas.KindEval, 2), trust.ReceiptSubject(r.run, 2)}
	for i := range n {
		other.Sent++
		_ = nc.Publish(targets[i%len(targets)], r.output(2, uint64(1<<20+i)))
	}
	// Reading others.
	read := r.byName["read-others"]
	for _, s := range []string{r.subject(schemas.KindReply, 2), schemas.All(r.run), ">"} {
		read.Sent++
		_, _ = nc.SubscribeSync(s)
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("rogue: after publishing on others' subjects: %w", err)
	}
	// The stream's API.
	admin := r.byName["stream-admin"]
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("rogue: %w", err)
	}
	stream := broker.StreamName(r.run)
	calls := []func(context.Context) error{
		func(ctx context.Context) error { return js.DeleteStream(ctx, stream) },
		func(ctx context.Context) error {
			_, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{schemas.All(r.run)}, MaxMsgs: 10, DenyDelete: true, DenyPurge: true})
			return err
		},
		func(ctx context.Context) error {
			s, err := js.Stream(ctx, stream)
			if err != nil {
				return err
			}
			return s.Purge(ctx)
		},
		func(ctx context.Context) error {
			s, err := js.Stream(ctx, stream)
			if err != nil {
				return err
			}
			return s.DeleteMsg(ctx, 1)
		},
		func(ctx context.Context) error {
			s, err := js.Stream(ctx, stream)
			if err != nil {
				return err
			}
			_, err = s.GetMsg(ctx, 1)
			return err
		},
		func(ctx context.Context) error {
			_, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Name: "party-1-ctl_1"})
			return err
		},
		func(ctx context.Context) error {
			_, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{NamePrefix: "party-1-reply", FilterSubjects: []string{r.subject(schemas.KindReply, 2)}})
			return err
		},
	}
	for _, call := range calls {
		admin.Sent++
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		if call(cctx) != nil {
			admin.Refused++
		}
		cancel()
	}
	// Its own subjects: the receiver's turn.
	out1, join1 := r.subject(schemas.KindOutput, 1), r.subject(schemas.KindHello, 1)
	junk := r.byName["junk"]
	for i := range n {
		b := make([]byte, 1+i%64)
		rand.Read(b)
		b[0] = 0xc1 // never used by msgpack: the rest is random, the whole undecodable
		junk.Sent++
		_ = nc.Publish(out1, b)
	}
	jump := r.byName["unsigned-jump"]
	for i := range n {
		jump.Sent++
		_ = nc.Publish(out1, r.output(1, uint64(1<<30+i)))
	}
	replay := r.byName["replay"]
	for i := range n {
		replay.Sent++
		_ = nc.Publish(out1, r.output(1, uint64(1+i%4)))
	}
	forged := r.byName["forged-signature"]
	unknown := r.byName["unknown-key"]
	unsigned := r.byName["unsigned-hello"]
	for i := range n {
		hello := r.hello()
		var head trust.Hash
		rand.Read(head[:])
		sig := trust.SignHead(r.key, "party-1", r.run, join1, nextHello, head) // the head is not the message's: it does not verify
		sig.Sig[i%64] ^= 1
		forged.Sent++
		_ = nc.PublishMsg(&nats.Msg{Subject: join1, Data: hello, Header: nats.Header{trust.SigHeader: []string{sig.Header()}}})
		usig := trust.SignHead(r.unknowKey, "party-9", r.run, join1, nextHello, head)
		unknown.Sent++
		_ = nc.PublishMsg(&nats.Msg{Subject: join1, Data: hello, Header: nats.Header{trust.SigHeader: []string{usig.Header()}}})
		unsigned.Sent++
		_ = nc.Publish(join1, hello)
	}
	if err := nc.Flush(); err != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		return fmt.Errorf("rogue: after publishing on its own subjects: %w (%d refusals, last %q)", err, len(r.refusals), r.refusals[max(0, len(r.refusals)-1):])
	}
	// The server's answers aimed into the stream: a JetStream API request
	// party 1 may make, with a reply subject among the run's.
	inject := r.byName["reply-to-injection"]
	r.injectAt = []string{r.subject(schemas.KindControl, 0), r.subject(schemas.KindReply, 2), r.subject(schemas.KindOutput, 2),
		broker.SubjectPrefix(r.run) + ".junk"}
	info := "$JS.API.STREAM.INFO." + stream
	for i := range n {
		inject.Sent++
		_ = nc.PublishRequest(info, r.injectAt[i%len(r.injectAt)], nil)
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("rogue: after the reply-to injection: %w", err)
	}
	// A pull relay: a consumer party 1 may make over its own replies, and
	// next-message requests whose reply subject lies in the run.
	relay := r.byName["pull-relay"]
	ownReply := r.subject(schemas.KindReply, 1)
	name := trust.OrderedNames(trust.ConsumerPrefix("party-1", []string{ownReply}), trust.DefaultOrderedResets)
	cname := name[len(name)-1] // the last of its names: the real party 1 uses the first ones
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, cerr := js.CreateConsumer(cctx, stream, jetstream.ConsumerConfig{Name: cname, FilterSubject: ownReply,
		AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: time.Minute})
	cancel()
	r.relayAt = []string{ownReply, r.subject(schemas.KindControl, 0)}
	next := "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + cname
	for i := range n {
		relay.Sent++
		if cerr != nil {
			relay.Refused++
			continue
		}
		_ = nc.PublishRequest(next, r.relayAt[i%len(r.relayAt)], []byte(`{"batch":1,"no_wait":true}`))
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("rogue: after the pull relay: %w", err)
	}
	if cerr == nil {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = js.DeleteConsumer(dctx, stream, cname)
		cancel()
	}
	// Oversized messages, on a connection of their own: the broker closes
	// a connection that publishes past its limit.
	big := r.byName["oversized"]
	blob := make([]byte, 4<<20)
	for range min(n, 5) {
		big.Sent++
		bc, err := r.conn()
		if err != nil {
			big.Refused++
			continue
		}
		if bc.Publish(out1, blob) != nil || bc.Flush() != nil {
			big.Refused++
		}
		bc.Close()
	}
	near := r.byName["oversize-near"]
	for range min(n, 5) {
		near.Sent++
		if !publishOwnConn(r.conn, out1, make([]byte, nearFloor)) {
			near.Refused++
		}
	}
	r.auditorReplyTo(ctx)
	// Anonymous connections.
	anon := r.byName["anonymous-connection"]
	for range min(n, 10) {
		anon.Sent++
		if nc, err := nats.Connect(r.url, nats.MaxReconnects(0), nats.Timeout(time.Second)); err != nil {
			anon.Refused++
		} else {
			nc.Close()
		}
	}
	// The broker's refusals of nc's publishes and subscriptions arrive
	// asynchronously, in order: a last publish it refuses marks their end
	// (a fixed 200 ms missed some on a busy host, and a refused message
	// counted as accepted).
	r.awaitRefusal(nc)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.refusals {
		switch e = strings.ToLower(e); {
		case strings.Contains(e, `permissions violation for publish to "asyrevel.`):
			other.Refused++ // (the stream API calls above are refused too, and counted there)
		case strings.Contains(e, "permissions violation for subscription"):
			read.Refused++
		}
	}
	return nil
}

// awaitRefusal publishes on nc to a subject no participant may publish
// to, and waits until the broker's refusal of it has been recorded: every
// refusal of what nc sent before is recorded then. A minute bounds a
// broker that refuses nothing (what was not refused counts as accepted).
func (r *Rogue) awaitRefusal(nc *nats.Conn) {
	marker := fmt.Sprintf("rogue-end.%d", time.Now().UnixNano())
	if nc.Publish(marker, nil) != nil || nc.Flush() != nil {
		return
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		r.mu.Lock()
		for _, e := range r.refusals {
			if strings.Contains(e, `"`+marker+`"`) {
				r.mu.Unlock()
				return
			}
		}
		r.mu.Unlock()
	}
}

// output is a well-formed PartyOutput of party m with sequence number seq.
func (r *Rogue) output(m int, seq uint64) []byte {
	b, err := r.codec.Marshal(&schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: uint16(m), Seq: seq},
		IDs: []uint32{1}, C: []float64{0.5}, CHat: []float64{0.6}})
	if err != nil {
		panic(err)
	}
	return append([]byte(nil), b...)
}

// nextHello is the sequence number after party 1's hellos: the one that
// asks to be called and the one that answers the call.
const nextHello = 3

// hello is a well-formed Hello of party 1 with sequence number nextHello.
func (r *Rogue) hello() []byte {
	b, err := r.codec.Marshal(&schemas.Hello{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: nextHello}, Model: "linear", InDim: 1, OutDim: 1, NTrain: 1})
	if err != nil {
		panic(err)
	}
	return append([]byte(nil), b...)
}

// SettleLog reads the fate of the categories that go by the log: the
// server's answers the stream stored on the injection's subjects (JSON,
// nobody's message) are listed apart by the audit, unless it accepted
// them (accepted: none of the audit's rejections or foreign messages
// cover them); the rest the stream refused. And oversized messages in
// the stream were accepted.
func (r *Rogue) SettleLog(recs func(func(*replay.Record)) error, rep *trust.AuditReport) error {
	landed := int64(0)
	at := map[string]bool{}
	for _, s := range r.injectAt {
		at[s] = true
	}
	big, near, audited := int64(0), int64(0), int64(0)
	auditAt := map[string]bool{}
	for _, s := range r.auditAt {
		auditAt[s] = true
	}
	relayAt := map[string]bool{}
	for _, s := range r.relayAt {
		relayAt[s] = true
	}
	seen := map[[32]byte]bool{}
	relayed := int64(0)
	err := recs(func(rec *replay.Record) {
		if at[rec.Subject] && len(rec.Data) > 0 && rec.Data[0] == '{' {
			landed++
		}
		if relayAt[rec.Subject] && len(rec.Data) > 0 && rec.Data[0] != '{' {
			k := sha256.Sum256(rec.Data)
			if seen[k] {
				relayed++
			}
			seen[k] = true
		}

		if len(rec.Data) >= 4<<20 {
			big++
		}
		if len(rec.Data) >= nearFloor && len(rec.Data) < 4<<20 {
			near++
		}
		if auditAt[rec.Subject] && (len(rec.Data) > 0 && rec.Data[0] == '{' || rec.Header.Get("Nats-Stream") != "") {
			audited++
		}
	})
	if err != nil {
		return err
	}
	inj := r.byName["reply-to-injection"]
	inj.Refused = inj.Sent - landed
	listed := int64(rep.Foreign)
	for _, n := range rep.Rejected {
		listed += int64(n)
	}
	inj.Rejected = min(landed, listed) // listed apart by the audit
	// The relayed copies: byte-identical to genuine messages, stored
	// again (counted by content, beyond each message's first copy).
	rl := r.byName["pull-relay"]
	if relayed > 0 {
		rl.Refused = max(0, rl.Sent-relayed)
		rl.Rejected = min(relayed, max(0, listed-inj.Rejected)) // listed apart too
	} else {
		rl.Refused = rl.Sent
	}
	ov := r.byName["oversized"]
	ov.Refused = ov.Sent - big
	nr := r.byName["oversize-near"]
	nr.Refused = nr.Sent - near // on the connection, or by the stream
	au := r.byName["auditor-reply-to"]
	au.Refused = au.Sent - audited // answered where the run's stream is not
	return nil
}

// settle fills each category's receiver rejections from the run's
// summary (its "aggregator:<reason>" counts).
func (r *Rogue) settle(rejected map[string]int64) {
	for _, c := range r.cats {
		for _, reason := range c.reasons {
			c.Rejected += rejected["aggregator:"+reason]
		}
		// The server's answers the injection aimed at party 2's output
		// subject reach the aggregator too, and are rejected as
		// undecodable, like the junk.
		c.Rejected = min(c.Rejected, c.Sent)
	}
}

// Run trains on the embedded broker with the trust layer on
// while a rogue holding party 1's key sends scale bad messages of each
// category; it returns the summary, the rogue and the output folder.
//
// The attack begins once the run has made attackAfter steps a party.
// With stopAfter, the run stops once the aggregator has handled every
// request the rogue sent (Hooks.StopWhen), and once hooks.StopWhen, if
// set, says so too; otherwise at its own end, which must come after the
// attack is over.
func Run(ctx context.Context, scale int, stopAfter bool, cfg run.Config, hooks run.Hooks) (*run.Summary, *Rogue, string, error) {
	out := cfg.Out
	keys := filepath.Join(out, "keys")
	urls := make(chan string, 1)
	injected := make(chan error, 1)
	var rg *Rogue
	var once sync.Once
	var attacked atomic.Bool // the rogue is done: the run may stop
	var steps atomic.Int64   // answered requests at the last evaluation
	// Requests in flight at once: each party's window (the default's
	// largest when not given).
	inFlight := int64(cfg.Parties * cmp.Or(cfg.Window, 8))
	doneSteps := int64(-1) // steps at the first evaluation after the attack
	prevStop := hooks.StopWhen
	stopWhen := func() bool {
		if !attacked.Load() {
			return false
		}
		if doneSteps < 0 {
			doneSteps = steps.Load()
			return false
		}
		// More requests answered since than were in flight when the
		// attack ended: the aggregator answered one sent after it, and
		// its subscription delivers in the stream's order, so it has
		// handled every one the rogue sent before. A half second after
		// the attack was not always enough on a busy host: a rejection
		// not counted yet left a bad message counted as accepted.
		return steps.Load() > doneSteps+inFlight && (prevStop == nil || prevStop())
	}
	if stopAfter {
		hooks.StopWhen = stopWhen
	}
	cfg.Trust = run.TrustConfig{KeysDir: keys, Auditor: true}
	hooks.OnBroker = func(u string) { urls <- u }
	prev := hooks.OnPoint
	hooks.OnPoint = func(pt aggregator.Point) {
		steps.Store(pt.Steps)
		if prev != nil {
			prev(pt)
		}
		// The first point comes at the start: every party sends a few
		// requests first (the replays reuse their first sequence
		// numbers), counted in steps, not a second that a busy host
		// spends on a handful.
		if pt.Steps < attackAfter*int64(cfg.Parties) {
			return
		}
		once.Do(func() {
			go func() {
				key, err := trust.ReadKeyFile(filepath.Join(keys, "party-1.nk"))
				var auditor *trust.Key
				if err == nil {
					auditor, err = trust.ReadKeyFile(filepath.Join(keys, trust.AuditorID+".nk"))
				}
				if err == nil {
					rg, err = newRogue(<-urls, cfg.Run, key, auditor, cfg.Parties, scale)
				}
				if err == nil {
					err = rg.attack(ctx)
				}
				attacked.Store(true)
				injected <- err
			}()
		})
	}
	s, err := run.Train(ctx, cfg, hooks)
	if err != nil {
		return nil, nil, out, err
	}
	select {
	case err := <-injected:
		if err != nil {
			return nil, nil, out, err
		}
	case <-time.After(30 * time.Second):
		return nil, nil, out, fmt.Errorf("the rogue never finished (the run ended after %d steps, %d points)", s.Steps, len(s.Curve))
	}
	if !attacked.Load() {
		return nil, nil, out, errors.New("the run ended before the attack did: make it longer")
	}
	rg.settle(s.Rejected)
	return s, rg, out, nil
}

// attackAfter is the steps a party the run makes before the attack.
const attackAfter = 50
