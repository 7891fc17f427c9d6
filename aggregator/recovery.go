package aggregator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/logread"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// recorded is a message of the log, kept for recovery.
type recorded struct {
	seq       uint64
	party     int
	req       uint64 // a reply's request
	data      []byte
	kind      schemas.Kind
	ctl       schemas.Control
	streamSeq uint64
	prev      trust.Hash // the chain head before it (trust layer)
	head      trust.Hash // and after it
}

// subjectIndex numbers the aggregator's subjects for recovery: 0 for the
// controls, m for the replies to party m (false for any other subject).
func (a *Aggregator) subjectIndex(subject string) (int, bool) {
	kind, m, err := schemas.ParseSubject(a.cfg.Run, subject)
	switch {
	case err != nil:
		return 0, false
	case kind == schemas.KindControl:
		return 0, true
	case kind == schemas.KindReply && m >= 1 && m <= a.q:
		return m, true
	}
	return 0, false
}

// recovered is what recovery verified of the parties' requests (trust
// layer): the live subscription, which delivers them again, answers a
// request at or below upTo (stream sequence) only if it is the very
// message verified (pending).
type recovered struct {
	upTo    uint64
	pending map[[2]uint64][]byte // (party, seq) -> payload, verified and not applied yet
}

// trustMsg is d as the trust layer sees it.
func trustMsg(d broker.Delivery, seq uint64) trust.Msg {
	return trust.Msg{StreamSeq: d.Seq(), Subject: d.Subject(), Seq: seq, Payload: d.Data(),
		Sig: d.Header(trust.SigHeader), Prev: d.Header(trust.PrevHeader)}
}

// recover reads the stream and applies what the aggregator did after its
// checkpoint (a.resumed set by Resume). Its replies and controls are
// numbered per subject (index i: 0 controls, m the replies to party m),
// so what it recorded is applied again in stream order, and each
// subject's numbers go on from the highest the checkpoint or the stream
// holds. Each subject is read on a consumer of its own (one filter: what
// the broker's permissions can check), merged by stream sequence.
//
// The phases are recovery's methods: newRecovery takes the checkpoint's
// positions (and, with the trust layer, starts a verifier of the
// aggregator's own chains), readStream reads the parties' messages and
// the aggregator's own, and apply (a.mu held) counts what was rejected,
// sends again what the stream lost, applies the recorded replies again
// and sets where each subject and chain goes on.
func (a *Aggregator) recover(ctx context.Context, bus broker.Bus) (err error) {
	// Labelled for CPU profiles (phase=recovery), with the goroutines it
	// starts (the reads' deliveries among them).
	pprof.Do(ctx, pprof.Labels("phase", "recovery"), func(ctx context.Context) {
		err = a.recoverLabelled(ctx, bus)
	})
	return err
}

func (a *Aggregator) recoverLabelled(ctx context.Context, bus broker.Bus) error {
	r, err := a.newRecovery(ctx, bus)
	if err != nil {
		return err
	}
	if err := r.readStream(); err != nil {
		return fmt.Errorf("%w: reading the stream: %w", ErrResume, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return r.apply()
}

// recovery is the state of one Aggregator.recover.
type recovery struct {
	a   *Aggregator
	ctx context.Context
	bus broker.Bus
	t   *aggTrust // nil without the trust layer
	run string
	t0  time.Time

	// The checkpoint's positions.
	last  []uint64 // per party: the last request applied
	ckSeq []uint64 // by subject index: the last message sent

	// own verifies the aggregator's own subjects from the checkpoint's
	// chains (trust layer; nil without it).
	own *trust.Verifier

	// What the stream holds.
	reqs     map[[2]uint64][]byte // (party, seq) -> a request after the checkpoint
	reqAt    map[[2]uint64]uint64 // (party, seq) -> its stream sequence, for those in reqs
	inStream map[[2]uint64]bool   // (party, seq): the requests the stream holds from the floor on
	mine     []recorded           // the aggregator's messages after the checkpoint, in stream order, not applied yet
	emit     func(recorded)       // while readStream runs: hands them to its reapply as they are read
	// reqMu guards what the requests' read fills (reqs, reqAt, inStream,
	// upTo, reqDone) while reapply runs beside it; reqCond says it moved.
	reqMu      sync.Mutex
	reqCond    *sync.Cond
	reqDone    bool               // the requests' read ended
	streamSeq  []uint64           // the highest sequence number in the stream, by subject index
	minKept    []uint64           // the outbox's lowest, by subject index
	have       map[[2]uint64]bool // (subject index, sequence) in the stream from minKept to ckSeq
	rejected   map[string]int64   // the parties' messages the verifier rejected, by reason
	foreign    int64              // messages on the aggregator's subjects that it did not make
	upTo       uint64             // the highest stream sequence of the requests
	read       int64              // messages read
	floor      uint64             // the requests and replies are read from here (0: the start)
	far        uint64             // the checkpoint's StreamFloor: the hellos and evaluations are read from here, and the requests if floor fails
	counted    bool               // count0 was taken
	laps       []string           // how long each part of the read took
	count0     uint64             // the stream's message count when recovery began
	othersTop  uint64             // the highest stream sequence of the hellos and evaluations read
	othersFrom uint64             // where they were read from (0: the start)

	// Decoding buffers (odec: the aggregator's own messages, read
	// beside the parties' ones).
	dec  *schemas.Codec
	odec *schemas.Codec
	o    schemas.PartyOutput
	r    schemas.Reply
	c    schemas.Control
	h    schemas.Hello
	ev   schemas.EvalOutput
}

// newRecovery takes the checkpoint's positions from the restored
// aggregator. With the trust layer, the chains are the sequence numbers,
// and a verifier of the aggregator's own subjects, started at the
// checkpoint's chains, admits only its own messages.
func (a *Aggregator) newRecovery(ctx context.Context, bus broker.Bus) (*recovery, error) {
	r := &recovery{a: a, ctx: ctx, bus: bus, t: a.tr, run: a.cfg.Run, t0: time.Now(),
		reqs: map[[2]uint64][]byte{}, reqAt: map[[2]uint64]uint64{}, inStream: map[[2]uint64]bool{}, have: map[[2]uint64]bool{}, rejected: map[string]int64{}, dec: schemas.NewCodec(), odec: schemas.NewCodec()}
	a.mu.Lock()
	r.last = slices.Clone(a.lastSeq[seqRequests])
	r.ckSeq = slices.Clone(a.pub.replySeq) // by subject index
	r.ckSeq[0] = a.pub.ctlSeq
	a.mu.Unlock()
	if t := r.t; t != nil {
		for i := range r.ckSeq {
			r.ckSeq[i] = t.out.LastSeq(r.subject(i))
		}
		var err error
		if r.own, err = trust.NewVerifier(a.cfg.Roster, trust.VerifierOptions{Subjects: a.cfg.Roster.Subjects(trust.AggregatorID),
			Every: a.cfg.Sign.Every, History: -1}); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrResume, err)
		}
		var states []trust.ChainState
		for _, e := range t.out.Entries() {
			states = append(states, trust.ChainState{Entry: e})
		}
		if err := r.own.Restore(states); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrResume, err)
		}
	}
	// The stream's count before this aggregator publishes anything: the
	// floor of its first checkpoints (a resumed aggregator's checkpoint
	// would otherwise hold none, and the next resume read everything).
	// A failed count leaves none rather than carrying the checkpoint's
	// floor forward: a broker that lost the tail of what it had confirmed
	// may number new messages from below that floor.
	if n, err := bus.Count(ctx, schemas.All(a.cfg.Run)); err == nil {
		r.count0, r.counted = n, true
	}
	if a.recov.resumeFloor > 1 {
		r.floor, r.far = a.recov.resumeFloor, a.recov.resumeFloor
		if n := a.recov.resumeNear; n > r.floor {
			r.floor = n // Checkpoint.NearFloor
		}
	} else {
		a.resumed.FromStart = "the checkpoint holds no stream position (its first minutes, or an older build)"
	}
	r.streamSeq = make([]uint64, len(r.ckSeq))
	r.minKept = make([]uint64, len(r.ckSeq))
	for i := range r.minKept {
		r.minKept[i] = r.ckSeq[i] + 1
	}
	for _, s := range a.recov.resumeOutbox {
		if i, ok := a.subjectIndex(s.Subject); ok {
			r.minKept[i] = min(r.minKept[i], s.Seq)
		}
	}
	return r, nil
}

// subject is the aggregator's subject of index i.
func (r *recovery) subject(i int) string {
	if i == 0 {
		return schemas.Subject(r.run, schemas.KindControl, 0)
	}
	return r.a.wire.subjReply[i]
}

// seen notes the aggregator's message seq on subject i and reports
// whether the checkpoint counts it as sent.
func (r *recovery) seen(i int, seq uint64) bool {
	r.streamSeq[i] = max(r.streamSeq[i], seq)
	if seq <= r.ckSeq[i] {
		if seq >= r.minKept[i] {
			r.have[[2]uint64{uint64(i), seq}] = true
		}
		return true
	}
	return false
}

// verifyIn runs a party's message through the restored verifier.
func (r *recovery) verifyIn(d broker.Delivery, seq uint64) bool {
	return r.verifyInto(d, seq, r.rejected)
}

// verifyInto is verifyIn counting what it rejects into rejected (the
// verifier is safe for concurrent use; the counts are not).
func (r *recovery) verifyInto(d broker.Delivery, seq uint64, rejected map[string]int64) bool {
	if r.t == nil {
		return true
	}
	m := trustMsg(d, seq)
	if err := r.t.ver.Verify(&m); err != nil {
		if !errors.Is(err, trust.ErrReplay) || seq > r.t.ver.LastSeq(d.Subject()) {
			rejected["trust-"+trust.Reason(err)]++
		}
		return false
	}
	return true
}

// readFloor reads the stream's messages on filter from the floor (the
// whole stream without one).
func (r *recovery) readFloor(ctx context.Context, filter string, fn func(broker.Delivery)) error {
	var n int64
	var err error
	if r.floor == 0 {
		n, err = logread.Deliveries(ctx, r.bus, []string{filter}, fn)
	} else {
		n, err = logread.Read(ctx, r.bus, []string{filter}, logread.Options{StartSeq: r.floor}, fn)
	}
	r.read += n
	return err
}

// fromStart gives up the floor: the requests and replies are read from
// the start of the stream, for the reason why.
func (r *recovery) fromStart(why string) {
	r.floor = 0
	r.a.resumed.FromStart = why
	r.a.cfg.Log.Info().Str("why", why).Msg("recovery reads the stream from its start")
}

// floorHolds checks that no request the resume must see lies below the
// floor. The floor is below every message the aggregator published after
// the checkpoint before (the stream's count then) and below its outbox,
// by construction; a request not handled at the checkpoint, though, was
// stored before the aggregator saw it, which may be long before (a
// backlog). Each party numbers its requests 1, 2, ... in stream order,
// so its messages below the floor are numbered at most what the
// checkpoint accepted of it (X) if there are at most X of them: the
// stream's count on its subject less the count from the floor. A party
// that numbered twice (sent again after its own resume) fails the check
// without need, and the stream is read from its start.
func (r *recovery) floorHolds() (string, error) {
	if r.counted && r.count0 < r.floor {
		// The stream's last sequence is its count (it only grows): it
		// lost messages counted when the floor was, and what was
		// published since may lie below the floor.
		return fmt.Sprintf("the stream holds %d messages, fewer than when the checkpoint's floor (stream sequence %d) was counted (a broker that lost messages it had confirmed?)", r.count0, r.floor), nil
	}
	return r.floorHoldsFor(r.floor, schemas.KindOutput)
}

// settleFloor checks the floor the requests are read from: the
// checkpoint's near floor, else its earlier one (StreamFloor), else the
// stream's start.
func (r *recovery) settleFloor() error {
	if r.floor == 0 {
		return nil
	}
	why, err := r.floorHolds()
	if err != nil {
		return err
	}
	if why != "" && r.far > 0 && r.far < r.floor {
		r.a.cfg.Log.Info().Str("why", why).Uint64("floor", r.far).Msg("recovery reads the requests from the checkpoint's earlier floor")
		r.floor = r.far
		if why, err = r.floorHolds(); err != nil {
			return err
		}
	}
	if why != "" {
		r.fromStart(why)
	}
	return nil
}

// floorHoldsFor is floorHolds for the parties' subjects of kinds: the
// requests' (checked against what the checkpoint applied and its
// verifier accepted), the hellos' and evaluations' (what the verifier
// accepted: trust layer).
func (r *recovery) floorHoldsFor(floor uint64, kinds ...schemas.Kind) (string, error) {
	// The counts of every party's subject at once: two requests to the
	// broker each (the second makes a consumer), one after the other
	// they were 40 to 150 ms of a resume.
	type counts struct {
		all, above uint64
		err, aerr  error
	}
	c := make([]counts, r.a.q+1)
	for _, k := range kinds {
		var wg sync.WaitGroup
		for m := 1; m <= r.a.q; m++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				subj := schemas.Subject(r.run, k, m)
				c[m].all, c[m].err = r.bus.Count(r.ctx, subj)
				if c[m].err == nil {
					c[m].above, c[m].aerr = logread.CountFrom(r.ctx, r.bus, subj, floor)
				}
			}()
		}
		wg.Wait()
		for m := 1; m <= r.a.q; m++ {
			subj := schemas.Subject(r.run, k, m)
			all, above := c[m].all, c[m].above
			if err := c[m].err; err != nil {
				return "", err
			}
			err := c[m].aerr
			if errors.Is(err, logread.ErrNoCount) {
				return "the bus cannot count the stream from a position", nil
			}
			if err != nil {
				return "", err
			}
			var x uint64
			if k == schemas.KindOutput {
				x = r.last[m]
			}
			if r.t != nil {
				x = max(x, r.t.ver.LastSeq(subj))
			}
			if below := all - min(all, above); below > x {
				return fmt.Sprintf("party %d has %d messages on %s below the checkpoint's floor (stream sequence %d), more than the %d it had accepted", m, below, subj, floor, x), nil
			}
		}
	}
	return "", nil
}

// floorReplies sets, reading from the floor, what the stream holds of
// each subject below the outbox's oldest message: the messages below the
// floor are not read, and a subject counts as whole up to its outbox if
// it holds that many.
func (r *recovery) floorReplies() error {
	for i := range r.ckSeq {
		n, err := r.bus.Count(r.ctx, r.subject(i))
		if err != nil {
			return err
		}
		if r.minKept[i] > 0 {
			r.streamSeq[i] = min(n, r.minKept[i]-1)
		}
	}
	return nil
}

// readStream reads the parties' requests (and, with the trust layer,
// their hellos and evaluations), and beside them the aggregator's
// replies and controls: two reads at once, each on its own consumers,
// since the two touch nothing of each other's. The floor is settled
// first. Read one after the other, the aggregator's own messages were a
// quarter to a third of a resume's read (issue 35).
//
// The aggregator's messages after the checkpoint are applied again as
// they are read (reapply, a.mu held for each), in stream order, each
// once the requests' read has passed it (a reply comes after its
// request): applying them after both reads had ended was up to a third
// of a return after a broker outage on a9a (issue 35). Nothing is
// published meanwhile; recovery's apply does the rest once all is read.
func (r *recovery) readStream() error {
	lap := func(laps *[]string, what string, t0 time.Time) {
		*laps = append(*laps, what+" "+time.Since(t0).Round(time.Millisecond).String())
	}
	t0 := time.Now()
	defer func() { lap(&r.laps, "all", t0) }()
	if err := r.settleFloor(); err != nil {
		return err
	}
	lap(&r.laps, "floor check", t0)
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		ownErr   error
		applyErr error
		ownLaps  []string
		ownRead  int64
	)
	r.reqMu.Lock()
	r.reqCond = sync.NewCond(&r.reqMu)
	r.reqMu.Unlock()
	// A queue without a bound: the reads' handlers must never wait for
	// reapply (a bus may hand both reads' messages over from one
	// goroutine, and reapply waits for the requests' read).
	var (
		qMu    sync.Mutex
		queue  []recorded
		closed bool
	)
	qCond := sync.NewCond(&qMu)
	r.emit = func(rec recorded) {
		qMu.Lock()
		queue = append(queue, rec)
		qMu.Unlock()
		qCond.Signal()
	}
	next := func() (recorded, bool) {
		qMu.Lock()
		defer qMu.Unlock()
		for len(queue) == 0 && !closed {
			qCond.Wait()
		}
		if len(queue) == 0 {
			return recorded{}, false
		}
		rec := queue[0]
		queue[0] = recorded{}
		queue = queue[1:]
		return rec, true
	}
	wg.Add(2)
	floor := r.floor // the requests' read may give it up (fromStart)
	go func() {
		defer wg.Done()
		ownRead, ownErr = r.readOwn(ctx, floor, func(what string, t time.Time) { lap(&ownLaps, what, t) })
		qMu.Lock()
		closed = true
		qMu.Unlock()
		qCond.Signal()
	}()
	go func() {
		defer wg.Done()
		t := time.Now()
		// The controls are all read before the replies (readOwn): each
		// waits for the first reply after it, or the end.
		var ctls []recorded
		apply := func(rec *recorded) {
			if applyErr != nil {
				return // drained
			}
			r.a.mu.Lock()
			applyErr = r.reapplyOne(rec)
			r.a.mu.Unlock()
			if applyErr != nil {
				cancel()
			}
		}
		for {
			rec, ok := next()
			if !ok {
				break
			}
			if rec.kind == schemas.KindControl {
				ctls = append(ctls, rec)
				continue
			}
			for len(ctls) > 0 && ctls[0].streamSeq < rec.streamSeq {
				apply(&ctls[0])
				ctls = ctls[1:]
			}
			r.requestsPast(rec.streamSeq)
			apply(&rec)
		}
		for i := range ctls {
			apply(&ctls[i])
		}
		lap(&ownLaps, "applied again", t)
	}()
	// The hellos and evaluations (trust layer) beside the requests: the
	// verifier is safe for concurrent use, and each read counts its own.
	var (
		othersErr  error
		othersRead int64
		othersRej  = map[string]int64{}
		othersLaps []string
	)
	if r.t != nil {
		wg.Add(1)
		// From the floor the requests are read from (the near one), else
		// the checkpoint's earlier one, each if the count rule holds for
		// the hellos and evaluations there (readPartyOthers).
		var floors []uint64
		if r.floor > 0 {
			floors = append(floors, r.floor)
			if r.far > 0 && r.far < r.floor {
				floors = append(floors, r.far)
			}
		}
		go func() {
			defer wg.Done()
			t := time.Now()
			othersRead, othersErr = r.readPartyOthers(ctx, floors, othersRej)
			lap(&othersLaps, "hellos and evaluations", t)
		}()
	}
	t1 := time.Now()
	err := r.readRequests(ctx)
	if errors.Is(err, logread.ErrNoCount) {
		r.fromStart("the bus cannot count the stream from a position")
		err = r.readRequests(ctx)
	}
	r.reqMu.Lock()
	r.reqDone = true
	r.reqCond.Broadcast()
	r.reqMu.Unlock()
	if err != nil {
		cancel()
	}
	lap(&r.laps, "requests", t1)
	wg.Wait()
	r.emit = nil
	r.read += ownRead + othersRead
	r.laps = append(append(r.laps, othersLaps...), ownLaps...)
	for k, v := range othersRej {
		r.rejected[k] += v
	}
	if err == nil {
		err = othersErr
	}
	// The first failure: one that cancelled the others comes first.
	switch {
	case applyErr != nil && !errors.Is(applyErr, context.Canceled):
		return applyErr
	case err != nil && !errors.Is(err, context.Canceled):
		return err
	case ownErr != nil && !errors.Is(ownErr, context.Canceled):
		return ownErr
	}
	return errors.Join(applyErr, err, ownErr)
}

// requestsPast waits until the requests' read has delivered a message
// at stream sequence seq or later, or has ended (or failed): every
// request stored before seq was then read.
func (r *recovery) requestsPast(seq uint64) {
	r.reqMu.Lock()
	defer r.reqMu.Unlock()
	for r.upTo < seq && !r.reqDone {
		r.reqCond.Wait()
	}
}

// readOwn reads the aggregator's controls, then its replies, each on a
// consumer of its own (one filter: what the broker's permissions can
// check), from floor (the stream's start if 0, or if the bus cannot
// count from a position: it then delivered nothing), each subject in
// stream order, and returns how many it read. It touches only what concerns the aggregator's own
// messages (streamSeq, have, own, foreign, odec, and hands those after
// the checkpoint to emit), so that it runs beside the read of the
// parties' messages, which may give up the floor for theirs: the floor
// holds for the aggregator's own messages by construction
// (Checkpoint.StreamFloor, Checkpoint.NearFloor).
func (r *recovery) readOwn(ctx context.Context, floor uint64, lap func(string, time.Time)) (int64, error) {
	if floor > 0 {
		if err := r.floorReplies(); err != nil {
			return 0, err
		}
	}
	var read int64
	for _, part := range []struct {
		what, filter string
		fn           func(broker.Delivery)
	}{
		{"controls", schemas.Subject(r.run, schemas.KindControl, 0), r.ownControl},
		{"replies", schemas.Filter(r.run, schemas.KindReply), r.ownReply},
	} {
		t := time.Now()
		var n int64
		var err error
		if floor > 0 {
			n, err = logread.Read(ctx, r.bus, []string{part.filter}, logread.Options{StartSeq: floor}, part.fn)
			if errors.Is(err, logread.ErrNoCount) {
				floor = 0
			}
		}
		if floor == 0 {
			n, err = logread.Deliveries(ctx, r.bus, []string{part.filter}, part.fn)
		}
		read += n
		lap(part.what, t)
		if err != nil {
			return read, err
		}
	}
	return read, nil
}

// readRequests keeps the parties' requests after the checkpoint that the
// verifier accepts.
func (r *recovery) readRequests(ctx context.Context) error {
	return r.readFloor(ctx, schemas.Filter(r.run, schemas.KindOutput), func(d broker.Delivery) {
		r.reqMu.Lock()
		defer r.reqMu.Unlock()
		defer r.reqCond.Broadcast()
		r.upTo = max(r.upTo, d.Seq())
		kind, m, err := schemas.ParseSubject(r.run, d.Subject())
		if err != nil || kind != schemas.KindOutput || m < 1 || m > r.a.q || r.dec.Unmarshal(d.Data(), &r.o) != nil {
			return
		}
		r.inStream[[2]uint64{uint64(m), r.o.Seq}] = true
		if r.t != nil && r.o.Seq <= r.t.ver.LastSeq(d.Subject()) {
			return // accepted (and handled) before the checkpoint
		}
		if !r.verifyIn(d, r.o.Seq) || r.o.Seq <= r.last[m] {
			return
		}
		r.reqs[[2]uint64{uint64(m), r.o.Seq}] = slices.Clone(d.Data())
		r.reqAt[[2]uint64{uint64(m), r.o.Seq}] = d.Seq()
	})
}

// readPartyOthers runs the hellos and evaluations after the checkpoint
// through the verifier (trust layer), which goes on after them (the live
// subscription starts after them). They are read from the first of
// floors (highest first) below which every party's hellos and
// evaluations are among those the checkpoint's verifier had accepted
// (floorHoldsFor), else from the stream's start.
func (r *recovery) readPartyOthers(ctx context.Context, floors []uint64, rejected map[string]int64) (int64, error) {
	// One read of both (the live subscription's filters): what it
	// delivers is a prefix of them in stream order, so the live
	// subscription goes on exactly after the last one (Aggregator.restFrom).
	// From a floor where no hello or evaluation the verifier had not
	// accepted lies below it (evaluations are large: a long run's would
	// make the resume grow with it again).
	filters := []string{schemas.Filter(r.run, schemas.KindHello), schemas.Filter(r.run, schemas.KindEval)}
	// The near floor first: the count rule is checked here, at the
	// resume, against what the checkpoint's verifier had accepted, so a
	// hello or an evaluation that waited in the other subscription when
	// the checkpoint was taken fails it, and the earlier floor is tried.
	// They were read from the earlier floor (StreamFloor) only: a whole
	// checkpoint period of evaluations before the checkpoint, which was
	// the longest of a resume's reads after a broker outage on a9a (160
	// to 543 ms, issue 35).
	dec := schemas.NewCodec()
	fn := func(d broker.Delivery) {
		r.othersTop = max(r.othersTop, d.Seq())
		kind, _, err := schemas.ParseSubject(r.run, d.Subject())
		if err != nil {
			return
		}
		var msg schemas.Message = &r.h
		if kind == schemas.KindEval {
			msg = &r.ev
		}
		if dec.Unmarshal(d.Data(), msg) == nil && msg.Head().Seq > r.t.ver.LastSeq(d.Subject()) {
			r.verifyInto(d, msg.Head().Seq, rejected)
		}
	}
	for _, floor := range floors {
		why, err := r.floorHoldsFor(floor, schemas.KindHello, schemas.KindEval)
		if err != nil {
			return 0, err
		}
		if why == "" {
			n, err := logread.Read(ctx, r.bus, filters, logread.Options{StartSeq: floor}, fn)
			if !errors.Is(err, logread.ErrNoCount) {
				// Everything from the floor to what was read was read.
				r.othersFrom = floor
				return n, err
			}
			why = "the bus cannot count the stream from a position"
			r.a.cfg.Log.Info().Str("why", why).Msg("recovery reads the hellos and evaluations from the stream's start")
			break
		}
		r.a.cfg.Log.Info().Str("why", why).Uint64("floor", floor).Msg("recovery does not read the hellos and evaluations from this floor")
	}
	return logread.Deliveries(ctx, r.bus, filters, fn)
}

// ownMsg is the aggregator's message d (sequence number seq on subject
// index i), kept if it continues its chains.
func (r *recovery) ownMsg(d broker.Delivery, seq uint64) (rec recorded, ok bool) {
	rec = recorded{seq: seq, streamSeq: d.Seq()}
	if r.own == nil {
		return rec, true
	}
	_, rec.prev, _ = r.own.Head(d.Subject())
	m := trustMsg(d, seq)
	if err := r.own.Verify(&m); err != nil {
		r.foreign++
		r.a.cfg.Log.Error().Err(err).Uint64("stream_seq", d.Seq()).Msg("recovery: a message on the aggregator's subjects that does not continue its chain: not applied")
		return rec, false
	}
	_, rec.head, _ = r.own.Head(d.Subject())
	return rec, true
}

// ownReply keeps a reply of the aggregator's after the checkpoint.
func (r *recovery) ownReply(d broker.Delivery) {
	kind, m, err := schemas.ParseSubject(r.run, d.Subject())
	if err != nil || kind != schemas.KindReply || m < 1 || m > r.a.q || r.odec.Unmarshal(d.Data(), &r.r) != nil || r.seen(m, r.r.Seq) {
		return
	}
	if rec, ok := r.ownMsg(d, r.r.Seq); ok {
		rec.party, rec.req, rec.data, rec.kind = m, r.r.ReqSeq, slices.Clone(d.Data()), kind
		r.keepMine(rec)
	}
}

// ownControl keeps a control of the aggregator's after the checkpoint.
func (r *recovery) ownControl(d broker.Delivery) {
	if r.odec.Unmarshal(d.Data(), &r.c) != nil || r.seen(0, r.c.Seq) {
		return
	}
	if rec, ok := r.ownMsg(d, r.c.Seq); ok {
		rec.kind, rec.ctl = schemas.KindControl, r.c
		rec.ctl.Reason = strings.Clone(r.c.Reason)
		r.keepMine(rec)
	}
}

// apply applies what was read to the aggregator (a.mu held).
func (r *recovery) apply() error {
	a := r.a
	rec := a.resumed
	a.recov.probe, a.pub.outbox.Floor = r.count0, r.count0
	a.recov.nears = a.recov.nears[:0]
	if r.count0 > 0 {
		a.recov.probedAt = time.Now()
	}
	// Every hello and evaluation stored when recovery read them was read
	// (none at all: from the start).
	a.recov.restFrom = max(r.othersTop+1, r.othersFrom)
	rec.Read = r.read
	rec.ReadFrom = max(r.floor, 1)
	rec.OthersFrom = max(r.othersFrom, 1)
	for k, v := range r.rejected {
		a.res.Rejected[k] += v
	}
	if r.foreign > 0 {
		a.res.Rejected["trust-foreign"] += r.foreign
	}
	if err := r.resend(); err != nil {
		return err
	}
	if err := r.reapply(); err != nil {
		return err
	}
	r.goOn()
	a.recov.reqFrom = r.liveFrom()
	// An evaluation requested while applying again was not sent: ask
	// anew (its round number follows the recorded ones).
	a.eval.cur = nil
	if a.phase == stopping {
		a.requestEval(true)
	}
	rec.LogSeconds = time.Since(r.t0).Seconds()
	a.cfg.Log.Info().Int64("checkpoint_steps", rec.FromSteps).Int64("reapplied", rec.Reapplied).Int64("mismatched", rec.Mismatched).
		Int64("missing", rec.Missing).Int64("read", rec.Read).Uint64("read_from", rec.ReadFrom).Uint64("others_from", rec.OthersFrom).Strs("read_took", r.laps).Str("took", time.Since(r.t0).Round(time.Millisecond).String()).
		Msg("resumed from the checkpoint and the stream")
	if rec.Mismatched > 0 {
		a.cfg.Log.Warn().Int64("mismatched", rec.Mismatched).Msg("recovery: replies computed again differ from the recorded ones")
	}
	return nil
}

// resend sends again, from the checkpoint's outbox, the messages the
// checkpoint counts as sent that the stream lacks (a broker that
// confirmed them and died before writing them), and counts those that
// neither holds (a.mu held).
func (r *recovery) resend() error {
	a, rec := r.a, r.a.resumed
	for _, s := range a.recov.resumeOutbox {
		i, ok := a.subjectIndex(s.Subject)
		if !ok || s.Seq > r.ckSeq[i] || r.have[[2]uint64{uint64(i), s.Seq}] {
			continue
		}
		if i > 0 && r.dec.Unmarshal(s.Data, &r.r) == nil && !r.inStream[[2]uint64{uint64(i), r.r.ReqSeq}] {
			// The stream lost the request it answers too: its party
			// sends that again when it resumes, and the reply follows it
			// then (releaseHeld), so that the log never holds an answer
			// before its question.
			if a.recov.held == nil {
				a.recov.held = map[[2]uint64]Sent{}
			}
			a.recov.held[[2]uint64{uint64(i), r.r.ReqSeq}] = s
			a.recov.heldSince = time.Now()
			continue
		}
		if err := r.bus.Publish(r.ctx, &broker.Message{Subject: s.Subject, Data: s.Data, Header: s.Header}); err != nil {
			return fmt.Errorf("%w: sending again what the stream lost: %w", ErrResume, err)
		}
		rec.Resent++
	}
	for i := range r.ckSeq {
		for seq := r.streamSeq[i] + 1; seq < r.minKept[i]; seq++ {
			rec.Unrecovered++
		}
	}
	if len(a.recov.held) > 0 {
		a.cfg.Log.Warn().Int("replies", len(a.recov.held)).Msg("the stream lacked replies and the requests they answer (a broker crash, or a full stream?): each reply is sent again after its request")
	}
	if rec.Resent+rec.Unrecovered > 0 {
		a.cfg.Log.Warn().Int64("resent", rec.Resent).Int64("unrecovered", rec.Unrecovered).
			Msg("the stream lacked messages the checkpoint counts as sent (a broker crash?): sent again from the checkpoint")
	}
	return nil
}

// reapply applies the aggregator's recorded messages again, in stream
// order: the controls' effects on its state, and each recorded reply's
// request, the reply computed again compared with the recorded one
// (a.mu held).
func (r *recovery) reapply() error {
	for _, m := range r.mine {
		if err := r.reapplyOne(&m); err != nil {
			return err
		}
	}
	r.mine = r.mine[:0]
	return nil
}

// reapplyOne applies the aggregator's recorded message m again (a.mu
// held).
func (r *recovery) reapplyOne(m *recorded) error {
	if m.kind == schemas.KindControl {
		return r.control(m)
	}
	return r.reply(m)
}

// keepMine hands the aggregator's message after the checkpoint to
// readStream's reapply as it is read, or keeps it for reapply.
func (r *recovery) keepMine(rec recorded) {
	if r.emit != nil {
		r.emit(rec)
		return
	}
	r.mine = append(r.mine, rec)
}

// control applies recorded control m again: the rounds and seals it
// counts; a stop or an abort refuses the resume (a.mu held).
func (r *recovery) control(m *recorded) error {
	a := r.a
	switch m.ctl.Op {
	case schemas.CtlEval:
		a.eval.rounds = max(a.eval.rounds, m.ctl.Round)
		a.keep.recorded(m.ctl.Keep)
	case schemas.CtlSeal:
		if r.t != nil {
			r.t.checkpoints = max(r.t.checkpoints, uint64(m.ctl.Round))
			a.res.Checkpoints = r.t.checkpoints
		}
	case schemas.CtlStop:
		return fmt.Errorf("%w: run %s is over (stopped: %s)", ErrResume, r.run, m.ctl.Reason)
	case schemas.CtlRefuse:
		if m.ctl.Party == 0 {
			return fmt.Errorf("%w: run %s was aborted (%s)", ErrResume, r.run, m.ctl.Reason)
		}
	}
	a.pub.ctlSeq = max(a.pub.ctlSeq, m.seq)
	return nil
}

// reply applies recorded reply m's request again, without publishing
// the reply: it is compared with the recorded one (a.mu held).
func (r *recovery) reply(m *recorded) error {
	a, rec, t := r.a, r.a.resumed, r.t
	p := m.party
	if m.req <= a.lastSeq[seqRequests][p] {
		rec.Duplicated++
		a.pub.replySeq[p] = max(a.pub.replySeq[p], m.seq)
		return nil
	}
	key := [2]uint64{uint64(p), m.req}
	r.reqMu.Lock()
	data, ok := r.reqs[key]
	if ok {
		delete(r.reqs, key)
	}
	r.reqMu.Unlock()
	if !ok {
		rec.Missing++
		a.cfg.Log.Error().Int("party", p).Uint64("request", m.req).Msg("recovery: a recorded reply's request is not in the stream")
		a.pub.replySeq[p] = max(a.pub.replySeq[p], m.seq)
		return nil
	}
	// The reply computed again takes the recorded one's number; the
	// controls it would publish are not sent (the recorded ones, in
	// the stream, number the controls).
	a.pub.replySeq[p] = m.seq - 1
	if t != nil {
		t.reply[p].Resume(m.seq-1, m.prev)
	}
	ctl := a.pub.ctlSeq
	mismatched := rec.Mismatched
	a.recov.replaying, a.recov.replayWant = true, m.data
	err := a.onOutput(p, data)
	a.recov.replaying, a.recov.replayWant = false, nil
	a.pub.ctlSeq = ctl
	if err != nil {
		return fmt.Errorf("%w: applying party %d's request %d again: %w", ErrResume, p, m.req, err)
	}
	if t != nil && rec.Mismatched > mismatched {
		return fmt.Errorf("%w: the reply to party %d's request %d in the stream (stream seq %d) is not the one computed again from the checkpoint: "+
			"the aggregator will not sign on over a message it did not make (a changed checkpoint or run settings?)", ErrResume, p, m.req, m.streamSeq)
	}
	a.res.Received[schemas.KindOutput.String()]++
	a.res.BytesIn += int64(len(data))
	rec.Reapplied++
	return nil
}

// goOn sets where each subject's numbers, and with the trust layer each
// chain, go on; it hands the live subscription what recovery verified
// (a.mu held).
func (r *recovery) goOn() {
	a, t := r.a, r.t
	// Each subject goes on after the highest number it holds.
	a.pub.ctlSeq = max(a.pub.ctlSeq, r.streamSeq[0])
	for m := 1; m <= a.q; m++ {
		a.pub.replySeq[m] = max(a.pub.replySeq[m], r.streamSeq[m])
	}
	if t == nil {
		return
	}
	// Each chain goes on from the last message of the stream that
	// continues it; a subject whose stream holds more (messages lost in
	// the middle, foreign ones) is restarted after them, signed.
	for i := range r.ckSeq {
		subj := r.subject(i)
		pub := t.ctl
		if i > 0 {
			pub = t.reply[i]
		}
		seq, head, _ := r.own.Head(subj)
		if top := r.streamSeq[i]; top > seq {
			a.cfg.Log.Warn().Str("subject", subj).Uint64("chain", seq).Uint64("stream", top).
				Msg("recovery: the stream holds messages on this subject that do not continue the checkpoint's chain: restarting it after them")
			pub.Restart(top)
			continue
		}
		if seq > 0 {
			pub.Resume(seq, head)
		}
	}
	a.recov.recovered = &recovered{upTo: r.upTo, pending: r.reqs}
}

// liveFrom is where the live subscription to the requests starts: at the
// first request that recovery read and did not apply (it is answered
// live), else right after the last one it read. What lies below was
// applied, by the checkpoint or by recovery, or rejected. Before, the
// subscription started at the floor, and every request between the floor
// and the end of the read (10,000 to 20,000 on a9a with a checkpoint every
// 1.4 to 3.2 s) was delivered a second time and skipped before the first
// new one was answered: 0.1 to 0.2 s of a return after a broker outage.
// 0 when recovery read no request: from the floor, as before.
func (r *recovery) liveFrom() uint64 {
	if r.upTo == 0 {
		return 0
	}
	from := r.upTo + 1
	for k := range r.reqs {
		from = min(from, r.reqAt[k])
	}
	return from
}

// heldWait bounds how long a reply held for its request (recovery's
// resend) waits: a request below the stream floor was not seen, and its
// party never sends it again.
const heldWait = 10 * time.Second

// releaseHeld sends the reply held for party m's request seq, which has
// just arrived again (a.mu held).
func (a *Aggregator) releaseHeld(m int, seq uint64) {
	k := [2]uint64{uint64(m), seq}
	if s, ok := a.recov.held[k]; ok {
		a.sendHeld(k, s)
	}
}

// releaseAllHeld sends every reply still held (a.mu held): after
// heldWait, and before a seal that counts them as sent.
func (a *Aggregator) releaseAllHeld() {
	if len(a.recov.held) == 0 {
		return
	}
	keys := slices.Collect(maps.Keys(a.recov.held))
	slices.SortFunc(keys, func(x, y [2]uint64) int { return cmp.Or(cmp.Compare(x[0], y[0]), cmp.Compare(x[1], y[1])) })
	a.cfg.Log.Warn().Int("replies", len(keys)).Msg("replies held for requests that did not come again: sent")
	for _, k := range keys {
		a.sendHeld(k, a.recov.held[k])
	}
}

// sendHeld publishes held reply s (key k) as first sent (a.mu held).
func (a *Aggregator) sendHeld(k [2]uint64, s Sent) {
	delete(a.recov.held, k)
	if err := a.bus.Publish(a.ctx, &broker.Message{Subject: s.Subject, Data: s.Data, Header: s.Header}); err != nil {
		a.fail(fmt.Errorf("sending again a reply the stream lost: %w", err))
		return
	}
	if a.resumed != nil {
		a.resumed.Resent++
	}
}

// wentOn says, once after a resume, that training goes on: the first
// request answered live, not applied again from the stream (a.mu held).
// It is when a recovery ends for whoever waits on the run (the
// experiment faults times recoveries by this line).
func (a *Aggregator) wentOn() {
	if a.resumed == nil || a.recov.goneOn || a.recov.replaying {
		return
	}
	a.recov.goneOn = true
	a.cfg.Log.Info().Int64("steps", a.res.Steps).Msg("training goes on after the resume")
}
