package party

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/internal/ckpt"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// Checkpoints and resume. A party saves w_m, its random state, its own
// sequence numbers (one per subject: hello, requests, evaluations,
// receipts), the aggregator's last ones it accepted (replies, controls),
// its step count
// and its requests in flight (batch, direction, regulariser difference).
// A resumed party restores them and reads its replies and the controls
// from the stream from the start: those up to the checkpoint's aggregator
// sequence on their subject are skipped, the later ones are applied
// again, and the messages it computes on the way that the stream already
// holds (its own sequence numbers on their subject) are not sent again.
// Its computation is deterministic given what it receives, so it ends
// where it was before the crash and goes on live.
//
// With the trust layer (Config.Key), the checkpoint also holds the chain
// of each of the party's subjects and its verifier's state of the reply
// and control subjects (run.go seals the file with the party's key:
// trust.SealState). A resumed party restores both: the aggregator's
// messages up to the restored position are skipped, the later ones
// verified as they were the first time; its own messages computed again
// go on its chains with the heads the stream gives (ResumeStream checks
// them against its own signatures), so its next message continues the
// chain the aggregator's verifier knows, signed.

// ErrResume reports a checkpoint that cannot be resumed from.
var ErrResume = errors.New("party: cannot resume")

// CheckpointVersion is the version of the checkpoint format.
const CheckpointVersion = 3

// DefaultCheckpointEvery is the longest time between the periodic saves
// of the default, adaptive Config.CheckpointEvery (0; ckpt.Every).
const DefaultCheckpointEvery = ckpt.DefaultEvery

// Pending is a request in flight.
type Pending struct {
	Seq     uint64
	IDs     []uint32
	U       []float64
	RegDiff float64
}

// Checkpoint is a party's state at one point of a run.
type Checkpoint struct {
	Version   int
	Run       string
	ID        int
	W         []float64
	RNG       []byte           // PCG state
	Seqs      [NumKinds]uint64 // this party's last sequence number by subject (schemas.Kind)
	AggSeq    [2]uint64        // the aggregator's last accepted sequence numbers: replies, controls
	HelloSeq  uint64
	T         int
	Head      int
	N         int
	Ring      []Pending
	Requests  uint64
	BatchSeed uint64
	Steps     int64
	Replies   int64
	Sent      int64 // Stats.Requests
	Up        int64 // Stats.MessagesUp
	BytesUp   int64
	MaxDelay  int
	Outbox    []Sent // the last requests published (outbox.go)
	// StreamFloor is a stream sequence below the oldest outbox message
	// and everything the party published after the checkpoint before
	// (0: not known): a resume reads its requests and the replies to it
	// from there (StreamFloor's use: run's resumeParty and catchUp).
	StreamFloor uint64
	// FloorEvalKnown says FloorEvalSeq is set: every evaluation chunk of
	// the party up to FloorEvalSeq was published before StreamFloor was
	// counted, every later one lands above StreamFloor. A resume then
	// reads the party's evaluation outputs from StreamFloor. (Checkpoints
	// of earlier builds lack both: their resume reads them all.)
	FloorEvalKnown bool
	FloorEvalSeq   uint64
	Saved          time.Time
	// Paused: saved when the run paused (CtlPause), with nothing in
	// flight; a resume fills the window again.
	Paused bool

	// The trust layer's state (Config.Key), Trust set: the chains of the
	// party's subjects and its verifier's state of the aggregator's.
	Trust    bool
	TrustOut []trust.Entry
	TrustIn  []trust.ChainState

	// The parameters of the evaluation rounds the party keeps (keep.go):
	// the round the aggregator named as best so far and the newest one
	// answered (0: none). Checkpoints of earlier builds lack them.
	KeptRound, NewestRound uint32
	KeptW, NewestW         []float64

	// HoldOut is what the party's rows kept aside (Config.HoldOut, or
	// the aggregator's from its call), HoldOutKnown that it is recorded
	// (checkpoints of earlier builds lack it): a resume splits its rows
	// the same way before it goes on.
	HoldOut      schemas.HoldOut
	HoldOutKnown bool
}

// checkpointKind names the party's checkpoints in their envelope
// (package ckpt).
const checkpointKind = "party"

// Encode writes c in the checkpoint envelope (package ckpt: the state in
// gob, with its kind, version, length and checksum).
func (c *Checkpoint) Encode(w io.Writer) error {
	return ckpt.Encode(w, checkpointKind, CheckpointVersion, c)
}

// DecodeCheckpoint reads a checkpoint written by Checkpoint.Encode, or by
// an earlier build (the bare gob state, without the envelope).
func DecodeCheckpoint(r io.Reader) (*Checkpoint, error) {
	var c Checkpoint
	if _, err := ckpt.Decode(r, checkpointKind, CheckpointVersion, &c); err != nil {
		return nil, fmt.Errorf("%w: reading the checkpoint: %w", ErrResume, err)
	}
	if c.Version != CheckpointVersion {
		return nil, fmt.Errorf("%w: checkpoint format %d, this build reads %d", ErrResume, c.Version, CheckpointVersion)
	}
	return &c, nil
}

// snapshot copies the state into c, reusing its buffers (p.mu held).
func (p *Party) snapshot(c *Checkpoint) {
	c.Version, c.Run, c.ID = CheckpointVersion, p.cfg.Run, p.cfg.ID
	c.W = append(c.W[:0], p.w...)
	c.RNG, _ = p.step.pcg.MarshalBinary()
	c.Seqs, c.AggSeq, c.HelloSeq, c.T, c.Head, c.N = p.seqs, p.aggSeq, p.join.helloSeq, p.t, p.head, p.n
	c.Paused = p.stop.pausing
	if len(c.Ring) != len(p.ring) {
		c.Ring = make([]Pending, len(p.ring))
	}
	for i, s := range p.ring {
		r := &c.Ring[i]
		r.Seq, r.RegDiff = s.seq, s.regDiff
		r.IDs = append(r.IDs[:0], s.ids...)
		r.U = append(r.U[:0], s.u...)
	}
	c.Requests, c.BatchSeed = p.requests, p.batchSeed
	c.Steps, c.Replies, c.Sent, c.Up, c.BytesUp, c.MaxDelay = p.stats.Steps, p.stats.Replies, p.stats.Requests, p.stats.MessagesUp, p.stats.BytesUp, p.stats.MaxDelay
	c.Outbox = p.outbox.Snapshot(c.Outbox)
	c.StreamFloor = p.recov.probe
	c.FloorEvalKnown, c.FloorEvalSeq = p.recov.probe > 0, p.recov.probeEvalSeq
	for _, s := range c.Outbox {
		c.StreamFloor = min(c.StreamFloor, s.Floor)
	}
	p.keep.save(c)
	c.HoldOut, c.HoldOutKnown = p.cfg.HoldOut.HoldOut, true
	c.Saved = time.Now()
	c.Trust, c.TrustOut, c.TrustIn = false, nil, nil
	if t := p.tr; t != nil {
		c.Trust, c.TrustOut, c.TrustIn = true, t.out.Entries(), t.ver.State()
	}
}

// Checkpoint returns a copy of the party's state.
func (p *Party) Checkpoint() *Checkpoint {
	p.mu.Lock()
	defer p.mu.Unlock()
	var c Checkpoint
	p.snapshot(&c)
	return &c
}

// NumKinds bounds the kinds of message (schemas.Kind) a party numbers.
const NumKinds = int(schemas.KindControl) + 1

// Resume restores the party from c before Run, for a stream that holds
// every message of this party that c counts as sent (on each subject,
// 1..c.Seqs[kind]): the messages the party computes again up to there
// are not sent again.
func (p *Party) Resume(c *Checkpoint) error {
	published := c.Seqs
	return p.resume(c, published, func(k schemas.Kind, seq uint64) bool { return seq <= published[k] })
}

// ResumeFrom is Resume for a stream that holds the party's messages whose
// sequence numbers, by subject (schemas.Kind), are in have (in any
// order): after a broker crash the stream can lack some in the middle.
// Those up to the checkpoint are sent again from its outbox, the later
// ones computed again and sent.
func (p *Party) ResumeFrom(c *Checkpoint, have map[schemas.Kind][]uint64) error {
	return p.ResumeStream(c, have, nil)
}

// ResumeStream is ResumeFrom for a party with the trust layer: own holds
// the party's own messages in the stream after the checkpoint's chains
// (each subject in stream order, headers included). They are checked
// against the checkpoint's chains and the party's signatures; the heads
// they give are where the party's chains go when it computes them again.
// A message that does not continue its chain (not the party's) is left
// out and logged.
func (p *Party) ResumeStream(c *Checkpoint, have map[schemas.Kind][]uint64, own []trust.Msg) error {
	if t := p.tr; t != nil && c.Trust {
		v, err := trust.NewVerifier(p.cfg.Roster, trust.VerifierOptions{Subjects: t.own, Every: p.cfg.Sign.Every, History: -1})
		if err != nil {
			return fmt.Errorf("%w: %w", ErrResume, err)
		}
		states := make([]trust.ChainState, 0, len(c.TrustOut))
		for _, e := range c.TrustOut {
			states = append(states, trust.ChainState{Entry: e})
		}
		if err := v.Restore(states); err != nil {
			return fmt.Errorf("%w: the checkpoint's chains: %w", ErrResume, err)
		}
		heads := make(map[[2]uint64]trust.Hash)
		for i := range own {
			m := &own[i]
			k := p.kindOf(m.Subject)
			if k < 0 || m.Seq <= v.LastSeq(m.Subject) {
				continue
			}
			if err := v.Verify(m); err != nil {
				p.cfg.Log.Error().Int("party", p.cfg.ID).Err(err).Uint64("stream_seq", m.StreamSeq).Msg("resume: a message on this party's subjects that does not continue its chain: left out")
				continue
			}
			_, h, _ := v.Head(m.Subject)
			heads[[2]uint64{uint64(k), m.Seq}] = h
			if k == rcptKind {
				p.recov.rcptInStream = max(p.recov.rcptInStream, m.Seq)
			}
		}
		p.recov.ownHeads = heads
	}
	var last [NumKinds]uint64
	set := make(map[[2]uint64]struct{})
	for k, seqs := range have {
		if int(k) >= NumKinds {
			continue
		}
		for _, s := range seqs {
			last[k] = max(last[k], s)
			set[[2]uint64{uint64(k), s}] = struct{}{}
		}
	}
	return p.resume(c, last, func(k schemas.Kind, seq uint64) bool { _, ok := set[[2]uint64{uint64(k), seq}]; return ok })
}

func (p *Party) resume(c *Checkpoint, published [NumKinds]uint64, has func(schemas.Kind, uint64) bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.tr == nil && c.Trust:
		return fmt.Errorf("%w: the checkpoint was written with the trust layer on: resume with the run's key and roster", ErrResume)
	case p.tr != nil && !c.Trust:
		return fmt.Errorf("%w: the checkpoint was written without the trust layer: resume with --no-trust, as the run began", ErrResume)
	case p.cfg.Sync || p.cfg.FirstOrder || p.cfg.Adversary != nil:
		return fmt.Errorf("%w: checkpoints hold the state of AsyREVEL parties only (not SynREVEL, TIG or attackers)", ErrResume)
	case c.Run != p.cfg.Run || c.ID != p.cfg.ID:
		return fmt.Errorf("%w: the checkpoint is of party %d of run %s, not party %d of %s", ErrResume, c.ID, c.Run, p.cfg.ID, p.cfg.Run)
	case c.HoldOutKnown && !c.HoldOut.Same(&p.cfg.HoldOut.HoldOut):
		return fmt.Errorf("%w: the party of the checkpoint kept %s, this process keeps %s: resume with the rows it trained on (%s)", ErrResume, keptAside(&c.HoldOut), keptAside(&p.cfg.HoldOut.HoldOut), c.HoldOut.String())
	case len(c.W) != len(p.w) || len(c.Ring) != len(p.ring) || c.T < 0 || c.Head < 0 || c.Head >= len(p.ring) || c.N < 0 || c.N > len(p.ring):
		return fmt.Errorf("%w: the checkpoint's dimensions (%d parameters, window %d) are not the run's (%d, %d)", ErrResume, len(c.W), len(c.Ring), len(p.w), len(p.ring))
	}
	for _, r := range c.Ring {
		if len(r.IDs) > cap(p.ring[0].ids) || len(r.U) != len(p.w) {
			return fmt.Errorf("%w: a request in flight does not fit the run's batch and model", ErrResume)
		}
		for _, id := range r.IDs {
			if int(id) >= p.cfg.Train.NRows {
				return fmt.Errorf("%w: a request in flight names sample %d of %d", ErrResume, id, p.cfg.Train.NRows)
			}
		}
	}
	if err := p.step.pcg.UnmarshalBinary(c.RNG); err != nil {
		return fmt.Errorf("%w: random state: %w", ErrResume, err)
	}
	skipTo := c.AggSeq
	if t := p.tr; t != nil {
		if err := t.out.Restore(c.TrustOut); err != nil {
			return fmt.Errorf("%w: the checkpoint's chains: %w", ErrResume, err)
		}
		if err := t.ver.Restore(c.TrustIn); err != nil {
			return fmt.Errorf("%w: the checkpoint's verifier state: %w", ErrResume, err)
		}
		// What the verifier accepted before the checkpoint was handled:
		// skipped, never verified (it would be a replay) nor applied again.
		skipTo[0] = max(skipTo[0], t.ver.LastSeq(p.subjects[schemas.KindReply]))
		skipTo[1] = max(skipTo[1], t.ver.LastSeq(p.subjects[schemas.KindControl]))
	}
	copy(p.w, c.W)
	p.keep.restore(c, len(p.w))
	for i, r := range c.Ring {
		s := &p.ring[i]
		s.seq, s.regDiff = r.Seq, r.RegDiff
		s.ids = append(s.ids[:0], r.IDs...)
		copy(s.u, r.U)
	}
	p.seqs, p.aggSeq, p.join.helloSeq, p.t, p.head, p.n = c.Seqs, c.AggSeq, c.HelloSeq, c.T, c.Head, c.N
	p.requests, p.batchSeed = c.Requests, c.BatchSeed
	p.stats.Steps, p.stats.Replies, p.stats.Requests, p.stats.MessagesUp, p.stats.BytesUp, p.stats.MaxDelay = c.Steps, c.Replies, c.Sent, c.Up, c.BytesUp, c.MaxDelay
	// The stream may lack the tail of what the checkpoint counts as sent
	// (a broker that confirmed it and died before writing it): Run sends
	// the requests among it again from the checkpoint's outbox.
	p.recov.resend = p.recov.resend[:0]
	lost := 0
	// The outbox keeps requests only (subject out.m).
	for _, s := range c.Outbox {
		if s.Seq <= c.Seqs[schemas.KindOutput] && !has(schemas.KindOutput, s.Seq) {
			p.recov.resend = append(p.recov.resend, s)
		}
	}
	for k := range NumKinds {
		for seq := published[k] + 1; seq <= c.Seqs[k]; seq++ {
			if schemas.Kind(k) != schemas.KindOutput || !slices.ContainsFunc(c.Outbox, func(s Sent) bool { return s.Seq == seq }) {
				lost++ // an evaluation chunk: its round goes on without this party
			}
		}
		published[k] = max(published[k], c.Seqs[k])
	}
	p.stats.EvalChunksLost = lost
	if lost > 0 {
		p.cfg.Log.Warn().Int("party", c.ID).Int("messages", lost).Msg("the stream lacks messages of the checkpoint that it keeps no copy of (evaluation chunks)")
	}
	p.recov.has = has
	p.started = true
	p.recov.resumed = true
	p.stop.topUp = c.Paused
	p.recov.skipTo = skipTo
	p.recov.published = published
	p.recov.resumeFloor = c.StreamFloor
	return nil
}

// saveCheckpoint hands a snapshot to Config.OnCheckpoint (p.mu not held).
// It is saved only once the broker has stored every message published up
// to the snapshot: the requests it counts as in flight must be in the
// stream, or nobody would answer them.
func (p *Party) saveCheckpoint(ctx context.Context) {
	if p.cfg.OnCheckpoint == nil {
		return
	}
	p.mu.Lock()
	// The snapshot's cost is the time it holds the lock, not the wait
	// for it (aggregator.saveCheckpoint).
	t0 := time.Now()
	ok := p.started && p.err == nil && p.bus != nil && !p.recov.rcptLost
	if ok {
		p.snapshot(&p.recov.ck)
	}
	p.recov.ckNow = false
	bus := p.bus
	snap := time.Since(t0)
	p.mu.Unlock()
	if !ok {
		return
	}
	log := p.cfg.Log.With().Int("party", p.cfg.ID).Logger()
	saved, took := ckpt.Save(ctx, bus, log, func() error { return p.cfg.OnCheckpoint(&p.recov.ck) })
	if took > 0 {
		p.mu.Lock()
		p.recov.ckTook = snap + took // the save's cost to the run (ckpt.Every)
		p.mu.Unlock()
	}
	if saved {
		p.probeStream(ctx, bus)
	}
}

// probeStream takes the stream's message count, which lies below
// whatever the party publishes from now on: the floor of its next
// checkpoint (Checkpoint.StreamFloor).
func (p *Party) probeStream(ctx context.Context, bus broker.Bus) {
	// The run's own ctx, and briefly: the probe is optional (a failed one
	// keeps the older, lower count), and a lost connection cancels ctx
	// at once; waiting it out kept a party from resuming for 5 s after a
	// broker crash (TestKillAndResume).
	n, ok := ckpt.Probe(ctx, bus, schemas.All(p.cfg.Run))
	if !ok {
		return
	}
	p.mu.Lock()
	// Read after the count: an evaluation chunk published from now on
	// lands above it. After a resume, the chunks the stream held before
	// it (up to published) lie below it too, while the party computes
	// them again (not sent again).
	p.recov.probe, p.outbox.Floor = n, n
	p.recov.probeEvalSeq = max(p.seqs[schemas.KindEval], p.recov.published[schemas.KindEval])
	p.mu.Unlock()
}

// rcptKind stands for the receipt subject where kinds index the party's
// subjects (ownHeads).
const rcptKind = NumKinds

// kindOf is the kind of the party's own subject s (rcptKind for its
// receipts), -1 for another.
func (p *Party) kindOf(s string) int {
	for _, k := range []schemas.Kind{schemas.KindHello, schemas.KindOutput, schemas.KindEval} {
		if p.subjects[k] == s {
			return int(k)
		}
	}
	if p.tr != nil && s == p.tr.rcpt.Subject() {
		return rcptKind
	}
	return -1
}

// chainRecomputed puts message seq of kind k, computed again after a
// resume and not sent (the stream holds it), on the party's chain: with
// the head the stream gives when ResumeStream checked it, else with the
// head of data. p.mu held.
func (p *Party) chainRecomputed(k schemas.Kind, seq uint64, data []byte) {
	if t := p.tr; t != nil {
		p.chainAgain(t.pubs[k], int(k), seq, data)
	}
}

// chainAgain is chainRecomputed for the publisher pub of subject kind k
// (rcptKind: the receipts).
func (p *Party) chainAgain(pub *trust.Publisher, k int, seq uint64, data []byte) {
	h, ok := p.recov.ownHeads[[2]uint64{uint64(k), seq}]
	if !ok {
		h = trust.NextHead(pub.Head(), seq, data)
	} else if h != trust.NextHead(pub.Head(), seq, data) {
		p.cfg.Log.Warn().Int("party", p.cfg.ID).Str("subject", pub.Subject()).Uint64("seq", seq).
			Msg("resume: a message computed again differs from the one in the stream; the chain follows the stream")
	}
	pub.Resume(seq, h)
	delete(p.recov.ownHeads, [2]uint64{uint64(k), seq})
}
