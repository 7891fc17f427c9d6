package adversary

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/broker/bustest"
	"github.com/asyrevel/asyrevel/internal/freeport"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// The closed doors (issue 33): the same bad messages on every form of
// broker the project makes a run's stream on, besides train's embedded one
// (the Rogue's): asyrevel broker --roster, and a stock nats-server
// configured by asyrevel keys server-config. Each category is a row of
// adversary.csv of its own.

// Sizes of the oversize categories, as measured on main before the
// bounds: a flood of 4,192,304-byte messages was stored on asyrevel
// broker --roster (its stream allowed 4 MiB), one of 1,046,576 bytes on
// the embedded broker (1 MiB).
const (
	nearFloor  = 1_046_576
	rosterJunk = 4_192_304
)

// publishOwnConn publishes data on subject on a connection of its own
// (a broker closes a connection that publishes past its limit) and
// reports whether the broker took it on the wire.
func publishOwnConn(conn func() (*nats.Conn, error), subject string, data []byte) bool {
	nc, err := conn()
	if err != nil {
		return false
	}
	defer nc.Close()
	return nc.Publish(subject, data) == nil && nc.Flush() == nil
}

// auditorReplyTo sends the run's auditor's requests with reply subjects
// inside the run (the last party's reply subject, a new subject): stream
// info and direct get, the API subjects it may use.
func (r *Rogue) auditorReplyTo(ctx context.Context) {
	c := r.byName["auditor-reply-to"]
	if r.auditor == nil {
		return
	}
	r.auditAt = []string{r.subject(schemas.KindReply, max(r.parties, 1)), broker.SubjectPrefix(r.run) + ".audit"}
	c.Sent += sendAuditorRequests(r.url, r.run, r.auditor, r.auditAt, r.scale)
}

// sendAuditorRequests sends n stream info and n direct get requests of
// run's stream as auditor key, their replies at the subjects at, and
// returns how many it sent.
func sendAuditorRequests(url, run string, key *trust.Key, at []string, n int) int64 {
	nc, err := nats.Connect(url, key.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(run, trust.AuditorID)))
	if err != nil {
		return 0
	}
	defer nc.Close()
	stream := broker.StreamName(run)
	sent := int64(0)
	for i := range n {
		to := at[i%len(at)]
		if nc.PublishRequest("$JS.API.STREAM.INFO."+stream, to, nil) == nil {
			sent++
		}
		if nc.PublishRequest("$JS.API.DIRECT.GET."+stream, to, []byte(`{"seq":1}`)) == nil {
			sent++
		}
	}
	_ = nc.Flush()
	return sent
}

// DoorsConfig is the part of the adversary experiment on the other broker
// forms: a run of Parties parties on Data there, Scale bad messages a
// category.
type DoorsConfig struct {
	Data    *run.Data
	Parties int
	Scale   int
	Seed    uint64
	Log     zerolog.Logger
	// Stock also runs the stock server's rows when a nats-server binary
	// is found (bustest.StockServerBinary); without one they are left out.
	Stock bool
}

// Doors runs the categories on asyrevel broker --roster's broker (its
// server, in this process: run.RosterBroker) and, with cfg.Stock, a stock
// nats-server:
//
//   - oversize-roster, oversize-stock: messages of 4,192,304 bytes and of
//     the broker's bound plus one, from party 1's key on its own output
//     subject;
//   - dead-join: the parties started alone and stopped after their
//     hellos, then started again with the aggregator and the same run id:
//     the dead hellos must not join, and the run must end;
//   - auditor-reply-to-roster: the auditor's requests with reply subjects
//     inside the run, while the run goes on;
//   - after-the-end: once the run is over, party 1's and the auditor's
//     requests with reply subjects inside the run: the sealed stream
//     stores none.
func Doors(ctx context.Context, cfg DoorsConfig) ([]*Category, error) {
	cats, err := rosterDoors(ctx, cfg)
	if err != nil {
		return cats, err
	}
	if cfg.Stock && bustest.StockServerBinary() != "" {
		c, err := stockOversize(ctx, cfg)
		if err != nil {
			return cats, err
		}
		cats = append(cats, c)
	}
	return cats, nil
}

// rosterDoors runs the roster broker's rows.
func rosterDoors(ctx context.Context, cfg DoorsConfig) ([]*Category, error) {
	tmp, err := os.MkdirTemp("", "asyrevel-doors-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	runID := "doors"
	roster, keys, auditor, err := doorKeys(runID, cfg.Parties, filepath.Join(tmp, "keys"))
	if err != nil {
		return nil, err
	}
	rb, err := run.NewRosterBroker(roster)
	if err != nil {
		return nil, err
	}
	rb.MaxMsgSize = run.RosterMaxMessage(roster)
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: filepath.Join(tmp, "store"), Configure: rb.Configure, MaxPayload: rb.MaxMsgSize})
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	if err := rb.CreateStream(ctx, srv); err != nil {
		return nil, err
	}
	sctx, stopSeal := context.WithCancel(ctx)
	sealed := make(chan error, 1)
	go func() {
		_, err := rb.SealWhenOver(sctx, srv)
		sealed <- err
	}()
	defer func() { stopSeal(); <-sealed }()
	url := srv.URL()
	count := streamCounter(url, runID, auditor)
	cats := []*Category{
		{Name: "oversize-roster", how: fmt.Sprintf("asyrevel broker --roster: messages of %d bytes (stored before) and of the broker's bound (%d bytes) plus one, on party 1's output subject", rosterJunk, rb.MaxMsgSize)},
		{Name: "dead-join", how: "asyrevel broker --roster: the parties started alone and stopped after their hellos, then started again with the aggregator and the same run id: a dead party's hello must not join"},
		{Name: "auditor-reply-to-roster", how: "asyrevel broker --roster: the auditor's stream info and direct get requests with reply subjects inside the run, during the run"},
		{Name: "after-the-end", how: "asyrevel broker --roster: once the run is over, party 1's and the auditor's stream info requests with reply subjects inside the run"},
	}
	party1 := func() (*nats.Conn, error) {
		return nats.Connect(url, keys[1].NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(runID, trust.PartyID(1))))
	}
	out1 := schemas.Subject(runID, schemas.KindOutput, 1)
	// Oversize.
	ov := cats[0]
	before, err := count(ctx)
	if err != nil {
		return cats, err
	}
	for i := range max(min(cfg.Scale, 10), 2) {
		size := rosterJunk
		if i%2 == 1 {
			size = int(rb.MaxMsgSize) + 1
		}
		ov.Sent++
		publishOwnConn(party1, out1, make([]byte, size))
	}
	after, err := count(ctx)
	if err != nil {
		return cats, err
	}
	ov.Refused = ov.Sent - int64(after-before)
	// The auditor's requests, during the run (its stream exists: the
	// answers would land now or never).
	au := cats[2]
	at := []string{schemas.Subject(runID, schemas.KindControl, 0), schemas.Subject(runID, schemas.KindReply, 1), broker.SubjectPrefix(runID) + ".audit"}
	before = after
	au.Sent = sendAuditorRequests(url, runID, auditor, at, cfg.Scale)
	if after, err = settle(ctx, count, before); err != nil {
		return cats, err
	}
	au.Refused = au.Sent - int64(after-before)
	// Dead joins, then the run to its end.
	dj := cats[1]
	dead, err := deadJoinRun(ctx, cfg, url, runID, filepath.Join(tmp, "keys"), count)
	dj.Sent = int64(dead)
	if err != nil {
		// The run did not end: a dead join got through (accepted).
		cfg.Log.Error().Err(err).Msg("the run after the dead joins")
		return cats, nil
	}
	dj.Rejected = int64(dead) // not admitted: skipped by the aggregator
	// After the end: the stream is sealed once the run is over.
	end := cats[3]
	if err := waitSealed(ctx, url, runID, auditor); err != nil {
		return cats, err
	}
	before, err = count(ctx)
	if err != nil {
		return cats, err
	}
	end.Sent = sendAuditorRequests(url, runID, auditor, at, cfg.Scale)
	if nc, err := party1(); err == nil {
		for i := range cfg.Scale {
			if nc.PublishRequest("$JS.API.STREAM.INFO."+broker.StreamName(runID), at[i%len(at)], nil) == nil {
				end.Sent++
			}
		}
		_ = nc.Flush()
		nc.Close()
	}
	if after, err = settle(ctx, count, before); err != nil {
		return cats, err
	}
	end.Refused = end.Sent - int64(after-before)
	return cats, nil
}

// doorKeys makes the keys of run with q parties and an auditor in dir
// (roster.json, aggregator.nk, party-M.nk, auditor.nk) and returns the
// roster, the participants' keys (0 the aggregator) and the auditor's.
func doorKeys(runID string, q int, dir string) (*trust.Roster, []*trust.Key, *trust.Key, error) {
	r, keys, err := trust.GenerateRun(runID, q)
	if err != nil {
		return nil, nil, nil, err
	}
	auditor, err := trust.GenerateKey()
	if err != nil {
		return nil, nil, nil, err
	}
	if r, err = trust.NewRosterWithAuditors(runID, r.Participants, []trust.Participant{{ID: trust.AuditorID, PublicKey: auditor.PublicKey()}}); err != nil {
		return nil, nil, nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, nil, err
	}
	if err := r.WriteFile(filepath.Join(dir, "roster.json"), true); err != nil {
		return nil, nil, nil, err
	}
	for m, k := range keys {
		id := trust.AggregatorID
		if m > 0 {
			id = trust.PartyID(m)
		}
		if err := trust.WriteKeyFile(filepath.Join(dir, id+".nk"), k, true); err != nil {
			return nil, nil, nil, err
		}
	}
	return r, keys, auditor, trust.WriteKeyFile(filepath.Join(dir, trust.AuditorID+".nk"), auditor, true)
}

// streamCounter counts the messages of run's stream at url, read as its
// auditor (stream info), for subjects matching the filters (none: all).
func streamCounter(url, runID string, auditor *trust.Key) func(ctx context.Context, filters ...string) (uint64, error) {
	return func(ctx context.Context, filters ...string) (uint64, error) {
		info, err := auditorInfo(ctx, url, runID, auditor, filters...)
		if err != nil {
			return 0, err
		}
		if len(filters) == 0 {
			return info.State.Msgs, nil
		}
		var n uint64
		for _, c := range info.State.Subjects {
			n += c
		}
		return n, nil
	}
}

// auditorInfo reads run's stream info as its auditor.
func auditorInfo(ctx context.Context, url, runID string, auditor *trust.Key, filters ...string) (*jetstream.StreamInfo, error) {
	nc, err := nats.Connect(url, auditor.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(runID, trust.AuditorID)))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, broker.StreamName(runID))
	if err != nil {
		return nil, err
	}
	var opts []jetstream.StreamInfoOpt
	if len(filters) == 1 {
		opts = append(opts, jetstream.WithSubjectFilter(filters[0]))
	}
	return st.Info(ctx, opts...)
}

// settle waits until the stream's count stops moving (the server answers
// requests asynchronously) and returns it: the same count three times
// 200 ms apart.
func settle(ctx context.Context, count func(context.Context, ...string) (uint64, error), last uint64) (uint64, error) {
	same := 0
	for same < 3 {
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		n, err := count(ctx)
		if err != nil {
			return last, err
		}
		if n == last {
			same++
		} else {
			last, same = n, 0
		}
	}
	return last, nil
}

// waitSealed waits until run's stream is sealed (for at most a minute).
func waitSealed(ctx context.Context, url, runID string, auditor *trust.Key) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if info, err := auditorInfo(ctx, url, runID, auditor); err == nil && info.Config.Sealed {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the finished run's stream was never sealed: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// deadJoinRun starts the parties of run on the broker at url alone, stops
// them once their hellos are stored, then starts them again with the
// aggregator and the same run id, and returns the number of dead hellos
// and the error of the second start (nil: every participant ended well).
func deadJoinRun(ctx context.Context, cfg DoorsConfig, url, runID, keys string, count func(context.Context, ...string) (uint64, error)) (int, error) {
	quiet := cfg.Log.Level(zerolog.ErrorLevel)
	base := func(id string) run.Config {
		return run.New(func(c *run.Config) {
			c.Parties = cfg.Parties
			c.Run = runID
			c.NATS = url
			c.Seed = cfg.Seed
			c.Epochs = 1
			c.JoinWait = 30 * time.Second
			c.Trust = run.TrustConfig{KeyFile: filepath.Join(keys, id+".nk"), RosterFile: filepath.Join(keys, "roster.json")}
		})
	}
	parties := func(ctx context.Context) <-chan error {
		errs := make(chan error, cfg.Parties)
		for m := 1; m <= cfg.Parties; m++ {
			go func() {
				_, err := run.Participate(ctx, base(trust.PartyID(m)), m, run.Hooks{Loaded: cfg.Data, Log: quiet})
				errs <- err
			}()
		}
		return errs
	}
	// The first attempt: hellos, then gone.
	dctx, stop := context.WithCancel(ctx)
	dead := parties(dctx)
	join := schemas.Filter(runID, schemas.KindHello)
	for {
		n, err := count(ctx, join)
		if err == nil && n >= uint64(cfg.Parties) {
			break
		}
		select {
		case <-ctx.Done():
			stop()
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	for range cfg.Parties {
		<-dead
	}
	// Everyone again, the aggregator too.
	actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	live := parties(actx)
	var errs []error
	if _, err := run.Aggregate(actx, base(trust.AggregatorID), run.Hooks{Loaded: cfg.Data, Log: quiet}); err != nil {
		errs = append(errs, fmt.Errorf("aggregator: %w", err))
		cancel()
	}
	for range cfg.Parties {
		if err := <-live; err != nil {
			errs = append(errs, fmt.Errorf("party: %w", err))
		}
	}
	return cfg.Parties, errors.Join(errs...)
}

// stockOversize is oversize-stock: on a stock nats-server configured by
// keys server-config (max_payload and the authorization block), the run's
// stream made by its aggregator as it makes it, party 1 sends messages of
// 4,192,304 and 1,046,576 bytes and of the run's bound plus one.
func stockOversize(ctx context.Context, cfg DoorsConfig) (*Category, error) {
	tmp, err := os.MkdirTemp("", "asyrevel-doors-stock-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	runID := "doorsstock"
	roster, keys, _, err := doorKeys(runID, cfg.Parties, filepath.Join(tmp, "keys"))
	if err != nil {
		return nil, err
	}
	grants, err := roster.Grants(trust.RunPolicy(roster, true))
	if err != nil {
		return nil, err
	}
	payload := run.RosterMaxMessage(roster)
	conf := fmt.Sprintf("max_payload: %d\n%s", payload, trust.AuthorizationBlock(runID, grants))
	url, stop, err := startStock(ctx, tmp, conf)
	if err != nil {
		return nil, err
	}
	defer stop()
	rc := run.New(func(c *run.Config) { c.Parties, c.Run = cfg.Parties, runID })
	bound := run.MaxMessage(&rc)
	agg, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{URL: url, Run: runID, Name: trust.AggregatorID, CreateOnly: true, MaxMsgSize: bound,
		Options: []nats.Option{keys[0].NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(runID, trust.AggregatorID))}})
	if err != nil {
		return nil, fmt.Errorf("the stock server's stream: %w", err)
	}
	defer agg.Close()
	c := &Category{Name: "oversize-stock", how: fmt.Sprintf("a stock nats-server configured by keys server-config (max_payload %d), the run's stream made by its aggregator (bound %d bytes): messages of %d and %d bytes and of the stream's bound plus one on party 1's output subject", payload, bound, rosterJunk, nearFloor)}
	out1 := schemas.Subject(runID, schemas.KindOutput, 1)
	before, err := agg.Count(ctx, out1)
	if err != nil {
		return nil, err
	}
	party1 := func() (*nats.Conn, error) {
		return nats.Connect(url, keys[1].NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(runID, trust.PartyID(1))))
	}
	for i := range max(min(cfg.Scale, 9), 3) {
		c.Sent++
		publishOwnConn(party1, out1, make([]byte, []int{rosterJunk, nearFloor, int(bound) + 1}[i%3]))
	}
	after, err := settle(ctx, func(ctx context.Context, _ ...string) (uint64, error) { return agg.Count(ctx, out1) }, before)
	if err != nil {
		return nil, err
	}
	c.Refused = c.Sent - int64(after-before)
	return c, nil
}

// startStock starts a stock nats-server binary with JetStream (store in
// dir) and configuration conf on a free loopback port, and returns its URL
// and a function that stops it.
func startStock(ctx context.Context, dir, conf string) (string, func(), error) {
	bin := bustest.StockServerBinary()
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return "", nil, err
	}
	ports, err := freeport.Pick("127.0.0.1", 1)
	if err != nil {
		return "", nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	cmd := exec.Command(bin, "-c", path, "-js", "-sd", filepath.Join(dir, "store"), "-a", "127.0.0.1", "-p", strconv.Itoa(ports[0]))
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	for end := time.Now().Add(10 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return "nats://" + addr, stop, nil
		}
		if time.Now().After(end) || ctx.Err() != nil {
			stop()
			return "", nil, fmt.Errorf("%s is not listening on %s: %w", bin, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
