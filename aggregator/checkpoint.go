package aggregator

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/asyrevel/asyrevel/internal/ckpt"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// Checkpoints and resume. The run's stream holds every update in order, so
// recovery is a replay: the aggregator saves its state (w_0, the table of
// outputs and their versions, its random state, its counters and the
// sequence numbers it has applied up to, per party) at an interval, at the
// start of training and when it stops; a resumed aggregator restores the
// latest checkpoint and reads the stream from there:
//
//   - requests it had applied before the checkpoint (per party, sequence
//     numbers up to Checkpoint.LastSeq) are skipped;
//   - requests it answered after the checkpoint, before it died, are
//     applied again in the order of its recorded replies, without
//     publishing them again; each recomputed reply is compared, byte for
//     byte, with the recorded one (Recovery.Mismatched);
//   - the other requests are answered as they come.
//
// So every request in the stream is answered exactly once, and the
// parties, which reject a reply whose aggregator sequence number does not
// increase, never apply one twice.
//
// Sequence numbers are per subject (a reply.m subject per party, and the
// controls): the checkpoint keeps the last one of each, its outbox
// numbers each message on its own subject, and the recorded replies and
// controls are applied again in stream order.
//
// With the trust layer (Config.Key), the checkpoint also holds the chain
// of each of the aggregator's subjects (sequence number and head), what
// its verifier had accepted of each party's subjects and the number of
// log checkpoints it had published (run.go seals the file with the
// aggregator's key: trust.SealState). The resumed aggregator restores
// them and then reads the stream with its headers:
//
//   - the parties' messages after the checkpoint go through the restored
//     verifier, in stream order, as they went through the old one: what
//     it rejects is counted and never applied; when the live subscription
//     delivers them again, a request is answered only if it is the very
//     message verified in recovery, and anything else at or below the
//     recovered stream position is skipped (Recovery.Skipped), neither
//     verified again nor applied;
//   - its own replies and controls after the checkpoint go through a
//     verifier of its own subjects started at the checkpoint's chains:
//     only messages that continue its chains, with its own signatures,
//     are applied again; the chains go on from the last of them, and its
//     next message on each subject is signed. A recomputed reply that
//     differs from the recorded one refuses the resume (signing on would
//     vouch for a message it did not make), and a chain the stream cannot
//     continue (its messages lost) is restarted (trust.Publisher.Restart),
//     which the parties accept only with the aggregator's signature.

// ErrResume reports a checkpoint or a stream that cannot be resumed from.
var ErrResume = errors.New("aggregator: cannot resume")

// CheckpointVersion is the version of the checkpoint format. Version 4
// writes the table and its versions as raw bytes (Checkpoint.TableRaw);
// a file of version 3, which gob-encodes them value by value, is still
// read.
const CheckpointVersion = 4

// checkpointVersions are the versions DecodeCheckpoint reads, this
// build's first.
var checkpointVersions = []int{CheckpointVersion, 3}

// DefaultCheckpointEvery is the longest time between the periodic saves
// of the default, adaptive Config.CheckpointEvery (0; ckpt.Every).
const DefaultCheckpointEvery = ckpt.DefaultEvery

// Checkpoint is the aggregator's state at one point of a run.
type Checkpoint struct {
	Version   int
	Run       string
	Parties   int
	K         int
	N         int
	Head      []float64   // w_0
	Table     []float64   // n x q*k: the latest outputs C[i][m]
	Ver       []uint32    // n x q: the version of party m when C[i][m] was written
	Versions  []uint32    // per party (0..q): answered requests
	LastSeq   [3][]uint64 // per subject class (requests, evaluations, hellos), per party
	RNG       []byte      // the head's direction generator (PCG)
	ReplySeq  []uint64    // per party (0..q): the last reply's sequence number on its subject
	CtlSeq    uint64      // the last control's sequence number
	Rounds    uint32      // evaluation rounds requested
	Steps     int64
	Training  time.Duration // training time at the checkpoint
	MaxStale  uint32
	StSum     float64
	StN       int64
	Curve     []Point
	TTT       float64
	Received  map[string]int64
	Published map[string]int64
	Rejected  map[string]int64
	BytesIn   int64
	BytesOut  int64
	StepBytes int64
	Departed  []bool // per party: departed at the checkpoint
	Outbox    []Sent // the last messages published (outbox.go)
	// StreamFloor is a stream sequence below every message a resume from
	// this checkpoint must read of the requests and replies (0: not
	// known, read the whole stream): the stream's message count seen
	// at the checkpoint before, lowered to the floor of the oldest
	// outbox message. See recovery.floorHolds.
	StreamFloor uint64
	// NearFloor is a floor much nearer the checkpoint (0: none): the
	// latest count of the stream, taken between saves too
	// (Aggregator.nearProbe), below which the checkpoint had handled
	// every request, lowered to the floors of the outbox's messages.
	// Each count is taken with each party's count of requests after it:
	// the requests below the count are among those, so the checkpoint
	// handled them all if it handled that many of each party's. The
	// floor lies below every request the checkpoint had not handled and
	// every message of the aggregator's own that a resume looks at, so
	// a resume reads the requests, replies and controls from it: a
	// fraction of a period before the checkpoint, where StreamFloor lies
	// a whole period before it (issue 35). The hellos and evaluations
	// are read from it too when the count rule holds for them there
	// (checked at the resume: one may wait in the other subscription when
	// a checkpoint is taken, and the counts do not cover them), else from
	// StreamFloor.
	NearFloor uint64
	Saved     time.Time

	// The trust layer's state (Config.Key), Trust set: the chains of the
	// aggregator's own subjects, its verifier's state of the parties'
	// subjects, and the number of log checkpoints published.
	Trust    bool
	TrustOut []trust.Entry
	TrustIn  []trust.ChainState
	Seals    uint64

	// Defense is the defense's state (its noise and each label's privacy
	// loss); nil for an undefended run.
	Defense *DefenseState
	// DefenseKey is the defense's secret key (Defense.Key): a resumed
	// run goes on with it, so that its noise and draws, and the summary
	// that re-execution reads, are the first part's.
	DefenseKey [32]byte

	// The model kept so far (keep.go): the best round on the held-out
	// rows, its evaluation and its head (KeepRound 0: none yet); EvalSteps
	// the steps when the last round was requested. Checkpoints of earlier
	// builds lack them: the choice starts again at the resume.
	KeepRound uint32
	KeepPoint Point
	KeepHead  []float64
	EvalSteps int64

	// TableRaw and VerRaw are Table and Ver as Encode writes them (format
	// 4): each value's bits, little-endian, 8 and 4 bytes a value.
	// DecodeCheckpoint turns them back into Table and Ver. gob encodes a
	// []float64 value by value (byte-reversed, as a variable-length
	// integer): on a9a with 4 parties (130,244 outputs and as many
	// versions) that was most of a save's cost, 13 ms of about 23 (the
	// rest mostly the seal), and the adaptive period is 50 times that
	// cost: a resume after a broker outage applied again that much more
	// (issue 35).
	TableRaw []byte
	VerRaw   []byte
}

// checkpointKind names the aggregator's checkpoints in their envelope
// (package ckpt).
const checkpointKind = "aggregator"

// Encode writes c in the checkpoint envelope (package ckpt: the state in
// gob, with its kind, version, length and checksum).
func (c *Checkpoint) Encode(w io.Writer) error {
	// A shallow copy with the table as raw bytes: c is not changed (a
	// hook may hold it while another encodes it).
	e := *c
	e.Version = CheckpointVersion
	e.TableRaw = make([]byte, 0, 8*len(c.Table))
	for _, v := range c.Table {
		e.TableRaw = binary.LittleEndian.AppendUint64(e.TableRaw, math.Float64bits(v))
	}
	e.VerRaw = make([]byte, 0, 4*len(c.Ver))
	for _, v := range c.Ver {
		e.VerRaw = binary.LittleEndian.AppendUint32(e.VerRaw, v)
	}
	e.Table, e.Ver = nil, nil
	return ckpt.Encode(w, checkpointKind, CheckpointVersion, &e)
}

// fromRaw turns TableRaw and VerRaw back into Table and Ver (format 4);
// a file of format 3 has Table and Ver themselves.
func (c *Checkpoint) fromRaw(version int) error {
	if version != 3 && (len(c.Table) != 0 || len(c.Ver) != 0) {
		return fmt.Errorf("%w: format %d holds the table as raw bytes only", ckpt.ErrDamaged, version)
	}
	if version == 3 && (len(c.TableRaw) != 0 || len(c.VerRaw) != 0) {
		return fmt.Errorf("%w: format 3 holds no raw table", ckpt.ErrDamaged)
	}
	if len(c.TableRaw)%8 != 0 || len(c.VerRaw)%4 != 0 {
		return fmt.Errorf("%w: a raw table of %d bytes, its versions of %d: not whole values", ckpt.ErrDamaged, len(c.TableRaw), len(c.VerRaw))
	}
	if len(c.TableRaw) > 0 {
		c.Table = make([]float64, len(c.TableRaw)/8)
		for i := range c.Table {
			c.Table[i] = math.Float64frombits(binary.LittleEndian.Uint64(c.TableRaw[8*i:]))
		}
	}
	if len(c.VerRaw) > 0 {
		c.Ver = make([]uint32, len(c.VerRaw)/4)
		for i := range c.Ver {
			c.Ver[i] = binary.LittleEndian.Uint32(c.VerRaw[4*i:])
		}
	}
	c.TableRaw, c.VerRaw = nil, nil
	return nil
}

// DecodeCheckpoint reads a checkpoint written by Checkpoint.Encode, or by
// an earlier build (the bare gob state, without the envelope).
func DecodeCheckpoint(r io.Reader) (*Checkpoint, error) {
	var c Checkpoint
	v, legacy, err := ckpt.DecodeVersions(r, checkpointKind, checkpointVersions, &c)
	if err != nil {
		return nil, fmt.Errorf("%w: reading the checkpoint: %w", ErrResume, err)
	}
	if legacy {
		v = c.Version // a file without the envelope: its state says
	}
	if c.Version != v || !slices.Contains(checkpointVersions, v) {
		return nil, fmt.Errorf("%w: checkpoint format %d, this build reads %d", ErrResume, c.Version, CheckpointVersion)
	}
	if err := c.fromRaw(v); err != nil {
		return nil, fmt.Errorf("%w: reading the checkpoint: %w", ErrResume, err)
	}
	c.Version = CheckpointVersion // the same state, whichever format held it
	return &c, nil
}

// Recovery is what a resumed aggregator found in the stream.
type Recovery struct {
	FromSteps   int64   `json:"from_steps"`           // steps in the checkpoint
	Reapplied   int64   `json:"reapplied"`            // requests answered after the checkpoint, applied again from the log
	Mismatched  int64   `json:"mismatched"`           // of those, recomputed replies that differ from the recorded ones
	Missing     int64   `json:"missing"`              // recorded replies whose request is not in the stream
	Resent      int64   `json:"resent"`               // messages of the checkpoint the stream had lost (a broker crash), published again
	Unrecovered int64   `json:"unrecovered"`          // messages the checkpoint counts as sent that neither the stream nor its outbox holds
	Duplicated  int64   `json:"duplicated"`           // requests answered twice in the stream
	Skipped     int64   `json:"skipped"`              // requests delivered again that were applied already
	Read        int64   `json:"read"`                 // messages read from the stream to recover
	ReadFrom    uint64  `json:"read_from"`            // the stream sequence the requests and replies were read from (1: the start)
	FromStart   string  `json:"from_start,omitempty"` // why they were read from the start rather than the checkpoint's floor
	OthersFrom  uint64  `json:"others_read_from"`     // the stream sequence the hellos and evaluations were read from (1: the start; trust layer)
	LogSeconds  float64 `json:"log_seconds"`          // time to read and apply the log
	Checkpoint  string  `json:"checkpoint_saved"`
}

// snapshot copies the state into c, reusing its buffers (a.mu held).
func (a *Aggregator) snapshot(c *Checkpoint) {
	c.Version, c.Run, c.Parties, c.K, c.N = CheckpointVersion, a.cfg.Run, a.q, a.k, a.n
	c.DefenseKey = a.cfg.Defense.Key
	c.Head = append(c.Head[:0], a.w0...)
	c.Table = append(c.Table[:0], a.table...)
	c.Ver = append(c.Ver[:0], a.ver...)
	c.Versions = append(c.Versions[:0], a.version...)
	for i := range c.LastSeq {
		c.LastSeq[i] = append(c.LastSeq[i][:0], a.lastSeq[i]...)
	}
	c.RNG, _ = a.step.pcg.MarshalBinary()
	c.ReplySeq, c.CtlSeq = append(c.ReplySeq[:0], a.pub.replySeq...), a.pub.ctlSeq
	c.Rounds, c.Steps = a.eval.rounds, a.res.Steps
	a.keep.save(c)
	c.EvalSteps = a.eval.steps
	if a.phase == training {
		c.Training = time.Since(a.start)
	} else {
		c.Training = a.res.Training
	}
	c.MaxStale, c.StSum, c.StN = a.res.MaxStaleness, a.stats.staleSum, a.stats.staleN
	c.Curve = append(c.Curve[:0], a.res.Curve...)
	c.TTT = a.res.TimeToTarget
	c.Received, c.Published, c.Rejected = cloneCounts(a.res.Received), cloneCounts(a.res.Published), cloneCounts(a.res.Rejected)
	c.BytesIn, c.BytesOut, c.StepBytes = a.res.BytesIn, a.res.BytesOut, a.res.StepBytes
	c.Departed = append(c.Departed[:0], a.departed...)
	c.Outbox = a.pub.outbox.Snapshot(c.Outbox)
	c.StreamFloor = a.recov.probe
	c.NearFloor = a.nearFloor()
	for _, s := range c.Outbox {
		c.StreamFloor = min(c.StreamFloor, s.Floor)
		c.NearFloor = min(c.NearFloor, s.Floor)
	}
	if c.NearFloor <= 1 || c.NearFloor < c.StreamFloor {
		// Not known, or no nearer: the resume reads from StreamFloor.
		c.NearFloor = 0
	}
	c.Saved = time.Now()
	c.Defense = nil
	if a.def.src != nil {
		c.Defense = a.def.state(c.Defense)
	}
	c.Trust, c.TrustOut, c.TrustIn, c.Seals = false, nil, nil, 0
	if t := a.tr; t != nil {
		c.Trust, c.TrustOut, c.TrustIn, c.Seals = true, t.out.Entries(), t.ver.State(), t.checkpoints
	}
}

func cloneCounts(m map[string]int64) map[string]int64 {
	c := make(map[string]int64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Checkpoint returns a copy of the aggregator's state.
func (a *Aggregator) Checkpoint() *Checkpoint {
	a.mu.Lock()
	defer a.mu.Unlock()
	var c Checkpoint
	a.snapshot(&c)
	return &c
}

// resumable says why this aggregator's state cannot be checkpointed
// completely ("" if it can): the other algorithms keep state that
// checkpoints do not hold yet.
func (a *Aggregator) resumable() string {
	switch {
	case a.cfg.Sync:
		return "SynREVEL rounds"
	case a.cfg.FirstOrder:
		return "TIG"
	}
	return ""
}

// Resume restores the aggregator from c before Run: Run then reads the
// stream to apply what came after the checkpoint (see Recovery). The
// leakage scores (privacy.json) are not kept in checkpoints: a resumed
// run does not score them.
func (a *Aggregator) Resume(c *Checkpoint) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if why := a.resumable(); why != "" {
		return fmt.Errorf("%w: checkpoints do not hold the state of %s yet", ErrResume, why)
	}
	switch {
	case c.Run != a.cfg.Run:
		return fmt.Errorf("%w: the checkpoint is of run %s, not %s", ErrResume, c.Run, a.cfg.Run)
	case c.Parties != a.q || c.K != a.k || c.N != a.n || c.Steps < 0:
		return fmt.Errorf("%w: the checkpoint has %d parties, k=%d, %d samples; the run %d, %d, %d", ErrResume, c.Parties, c.K, c.N, a.q, a.k, a.n)
	case len(c.Head) != len(a.w0) || len(c.Table) != len(a.table) || len(c.Ver) != len(a.ver) ||
		len(c.Versions) != len(a.version) || len(c.LastSeq[0]) != a.q+1 || len(c.LastSeq[1]) != a.q+1 || len(c.LastSeq[2]) != a.q+1 || len(c.ReplySeq) != a.q+1:
		return fmt.Errorf("%w: the checkpoint's dimensions are not the run's", ErrResume)
	}
	if err := a.step.pcg.UnmarshalBinary(c.RNG); err != nil {
		return fmt.Errorf("%w: random state: %w", ErrResume, err)
	}
	if err := a.def.restore(c.Defense); err != nil {
		return err
	}
	switch t := a.tr; {
	case t == nil && c.Trust:
		return fmt.Errorf("%w: the checkpoint was written with the trust layer on: resume with the run's key and roster", ErrResume)
	case t != nil && !c.Trust:
		return fmt.Errorf("%w: the checkpoint was written without the trust layer: resume with --no-trust, as the run began", ErrResume)
	case t != nil:
		if err := t.out.Restore(c.TrustOut); err != nil {
			return fmt.Errorf("%w: the checkpoint's chains: %w", ErrResume, err)
		}
		if err := t.ver.Restore(c.TrustIn); err != nil {
			return fmt.Errorf("%w: the checkpoint's verifier state: %w", ErrResume, err)
		}
		t.checkpoints = c.Seals
		a.res.Checkpoints = c.Seals
	}
	copy(a.w0, c.Head)
	copy(a.table, c.Table)
	copy(a.ver, c.Ver)
	copy(a.version, c.Versions)
	for i := range a.lastSeq {
		copy(a.lastSeq[i], c.LastSeq[i])
	}
	for m := 1; m <= a.q; m++ {
		a.hello[m] = true
		a.join.initAt[m] = uint32(a.n)
	}
	a.join.rem = 0
	copy(a.pub.replySeq, c.ReplySeq)
	a.pub.ctlSeq, a.eval.rounds = c.CtlSeq, c.Rounds
	a.keep.restore(c)
	a.eval.steps = c.EvalSteps
	a.res.Steps, a.res.MaxStaleness, a.stats.staleSum, a.stats.staleN = c.Steps, c.MaxStale, c.StSum, c.StN
	a.res.Curve = slices.Clone(c.Curve)
	a.res.TimeToTarget = c.TTT
	for k, v := range c.Received {
		a.res.Received[k] = v
	}
	for k, v := range c.Published {
		a.res.Published[k] = v
	}
	for k, v := range c.Rejected {
		a.res.Rejected[k] = v
	}
	a.res.BytesIn, a.res.BytesOut, a.res.StepBytes = c.BytesIn, c.BytesOut, c.StepBytes
	if len(c.Departed) == len(a.departed) {
		copy(a.departed, c.Departed)
	}
	if n := len(c.Curve); n > 0 {
		a.eval.lastPt.at, a.eval.lastPt.msgs = time.Duration(c.Curve[n-1].Seconds*float64(time.Second)), a.msgCount()
	}
	a.phase, a.res.Started = training, true
	a.recov.trainedBefore = c.Training
	a.def.leak.on, a.def.leak.why = false, "not scored: the run was resumed from a checkpoint"
	a.resumed = &Recovery{FromSteps: c.Steps, Checkpoint: c.Saved.UTC().Format(time.RFC3339)}
	a.recov.resumeOutbox = c.Outbox
	a.recov.resumeFloor, a.recov.resumeNear = c.StreamFloor, c.NearFloor
	return nil
}

// replayPublish stands for publish while a request answered before the
// crash is applied again: nothing is sent, the encoded message is
// compared with the recorded one.
func (a *Aggregator) replayPublish(data []byte) {
	if !bytes.Equal(data, a.recov.replayWant) {
		a.resumed.Mismatched++
	}
}

// newPCG is the head's generator for seed.
func newPCG(seed uint64) *rand.PCG { return rand.NewPCG(seed, 0) }

// errApplied marks a request read again from the stream after a resume
// that the checkpoint or the recovery had applied already: skipped and
// counted (Recovery.Skipped), not rejected.
var errApplied = errors.New("applied before the resume")

// saveCheckpoint hands a snapshot of the state to Config.OnCheckpoint
// (from Run's goroutine, a.mu not held).
//
// The snapshot is saved only once the broker has stored everything
// published up to it: a checkpoint must never count as applied an update
// whose reply the stream lacks (the party would wait for it for ever).
func (a *Aggregator) saveCheckpoint(ctx context.Context) {
	t0 := time.Now()
	a.mu.Lock()
	// The snapshot's cost is the time it holds the lock, training's; the
	// wait for the lock is not (under load it was most of this save's
	// measured cost, and the adaptive period grew with it).
	ts := time.Now()
	a.recov.ckNow = false
	a.snapshot(&a.recov.ck)
	bus := a.bus
	snap := time.Since(ts)
	a.mu.Unlock()
	// The stream's message count after the save lies below everything
	// published from here on (its last sequence is at least the count):
	// the next checkpoint's floor (Checkpoint.StreamFloor). A failed
	// count keeps the older, lower one.
	saved, took := ckpt.Save(ctx, bus, a.cfg.Log, func() error { return a.cfg.OnCheckpoint(&a.recov.ck) })
	if took > 0 {
		a.mu.Lock()
		a.recov.ckTook = snap + took // the save's cost to the run (ckpt.Every)
		a.mu.Unlock()
	}
	if !saved {
		return
	}
	if n, ok := ckpt.Probe(ctx, bus, schemas.All(a.cfg.Run)); ok {
		a.mu.Lock()
		a.recov.probe, a.pub.outbox.Floor = n, n
		a.recov.probedAt = time.Now()
		a.mu.Unlock()
	}
	a.mu.Lock()
	cost := a.recov.ckTook
	a.mu.Unlock()
	a.cfg.Log.Debug().Int64("steps", a.recov.ck.Steps).Str("took", time.Since(t0).Round(time.Millisecond).String()).
		Str("cost", cost.Round(10*time.Microsecond).String()).Str("next_in", ckpt.Every(a.cfg.CheckpointEvery, cost).String()).Msg("checkpoint saved")
}

// nearCount is a count of the stream (n) taken between saves, and each
// party's count of requests taken after it (reqs, by party).
type nearCount struct {
	n    uint64
	reqs []uint64
}

// nearKeep is how many of the latest counts the aggregator keeps: the
// near floor is the latest below which every request was handled.
const nearKeep = 16

// nearProbeShare and nearProbeMax say how often the stream is counted
// between saves: every share of the checkpoint period, at least every
// tick of Run, at most every nearProbeMax. The outbox's messages (the
// last 256 sent, tens of milliseconds' worth while training) then
// record a count taken a fraction of a period before the next save, and
// so does that save's near floor (Checkpoint.NearFloor). One STREAM.INFO
// for the stream and one per party each time.
const (
	nearProbeShare = 8
	nearProbeMax   = time.Second
)

// nearProbe counts the stream's messages between saves, if the last
// count is older than a share of the checkpoint period every (from Run's
// goroutine, a.mu not held), then each party's requests. Everything
// published after the count lands above it (the stream only grows): the
// count is the floor of the outbox's messages kept from now on. Every
// request stored below it is among the party's requests counted after
// it: once the aggregator has handled that many of each party's, the
// count is a near floor (nearFloor). A failed count keeps the older,
// lower one.
func (a *Aggregator) nearProbe(ctx context.Context, every time.Duration) {
	a.mu.Lock()
	due := a.phase == training && !a.recov.probedAt.IsZero() && time.Since(a.recov.probedAt) >= min(every/nearProbeShare, nearProbeMax)
	bus := a.bus
	a.mu.Unlock()
	if !due {
		return
	}
	n, ok := ckpt.Probe(ctx, bus, schemas.All(a.cfg.Run))
	a.mu.Lock()
	a.recov.probedAt = time.Now()
	if ok {
		a.pub.outbox.Floor = n
	}
	a.mu.Unlock()
	if !ok {
		return
	}
	reqs := make([]uint64, a.q+1)
	errs := make([]error, a.q+1)
	pctx, cancel := context.WithTimeout(ctx, ckpt.ProbeWait)
	defer cancel()
	var wg sync.WaitGroup
	for m := 1; m <= a.q; m++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs[m], errs[m] = bus.Count(pctx, schemas.Subject(a.cfg.Run, schemas.KindOutput, m))
		}()
	}
	wg.Wait()
	if errors.Join(errs...) != nil {
		return
	}
	a.mu.Lock()
	if len(a.recov.nears) == nearKeep {
		a.recov.nears = append(a.recov.nears[:0], a.recov.nears[1:]...)
	}
	a.recov.nears = append(a.recov.nears, nearCount{n: n, reqs: reqs})
	a.mu.Unlock()
}

// nearFloor is the checkpoint's near floor (Checkpoint.NearFloor; 0:
// none) before the outbox lowers it: the latest count below which every
// party's requests were handled, as floorHolds counts them: applied, or
// accepted by the verifier (a.mu held). The older counts are dropped.
func (a *Aggregator) nearFloor() uint64 {
	nears := a.recov.nears
	for i := len(nears) - 1; i >= 0; i-- {
		all := true
		for m := 1; m <= a.q && all; m++ {
			x := a.lastSeq[seqRequests][m]
			if a.tr != nil {
				x = max(x, a.tr.ver.LastSeq(schemas.Subject(a.cfg.Run, schemas.KindOutput, m)))
			}
			all = x >= nears[i].reqs[m]
		}
		if all {
			a.recov.nears = append(nears[:0], nears[i:]...)
			return nears[i].n
		}
	}
	return 0
}

// leave stops round c waiting for the parties that sent nothing for
// idle (Config.PartyTimeout): they count as departed, training goes on
// without them and the evaluations use their last outputs until they
// send a request again (back). a.mu held.
func (a *Aggregator) leave(c *round, idle time.Duration) {
	for m := 1; m <= a.q; m++ {
		if !c.wait[m] {
			continue
		}
		left := 0
		for s, bit := range [2]uint8{schemas.EvalTrain, schemas.EvalTest} {
			total := a.n
			if s == 1 {
				total = len(a.cfg.TestLabels)
			}
			if c.splits&bit != 0 && int(c.next[m][s]) < total {
				left++
			}
		}
		if left == 0 {
			continue
		}
		c.wait[m], c.without = false, true
		c.remaining -= left
		if time.Since(a.waits.lastReq[m]) < max(idle, a.cfg.PartyTimeout) {
			// It trains, but does not answer evaluations: scored with its
			// last outputs, marked stale; later rounds wait for it only
			// briefly (silentWait).
			if !a.eval.silent[m] {
				a.cfg.Log.Warn().Int("party", m).Str("idle", idle.Round(time.Millisecond).String()).Uint32("round", c.id).
					Msg("party sends requests but no evaluation outputs: this evaluation uses its last outputs (marked stale in the log, curve.csv and summary.json); later ones wait for it briefly")
			}
			a.eval.silent[m] = true
			continue
		}
		a.eval.silent[m] = true
		a.departed[m] = true
		why := fmt.Sprintf("no answer to evaluation round %d for %v (--party-timeout)", c.id, idle.Round(time.Second))
		a.res.Departed[m] = why
		a.res.Timeouts++
		a.cfg.Log.Warn().Int("party", m).Str("idle", idle.Round(time.Second).String()).Uint32("round", c.id).
			Msg("party silent: no request and no evaluation outputs; training goes on without it and evaluations use its last outputs (marked stale) until it sends again")
	}
	c.progress = time.Now()
	if c.remaining <= 0 {
		c.remaining = 0
		a.score(c)
	}
}

// back marks a departed party that sends a request again as present.
func (a *Aggregator) back(m int) {
	a.departed[m] = false
	a.res.Returned++
	a.cfg.Log.Info().Int("party", m).Msg("departed party is back: the evaluations wait for it again from the next round")
}

// stalled ends the run (ErrStalled) when training made no step for
// Config.EvalTimeout while no evaluation was waiting, whether the parties
// answer evaluations (messages lost in flight) or have all departed
// (a.mu held); it tells the parties to save their state.
func (a *Aggregator) stalled(now time.Time) bool {
	if a.res.Steps != a.waits.stallSteps || a.waits.stallSince.IsZero() {
		a.waits.stallSteps, a.waits.stallSince = a.res.Steps, now
		return false
	}
	idle := now.Sub(a.waits.stallSince)
	if idle < a.cfg.EvalTimeout {
		return false
	}
	present := false
	for m := 1; m <= a.q; m++ {
		present = present || !a.departed[m]
	}
	err := fmt.Errorf("%w: no request answered for %v (--wait) while the parties answer evaluations: requests or replies were lost in flight "+
		"(a broker that crashed before storing them?); restart every participant with --resume, which recomputes them", ErrStalled, idle.Round(time.Second))
	if !present {
		err = fmt.Errorf("%w: no request answered for %v (--wait) and every party has departed; restart them with --resume", ErrStalled, idle.Round(time.Second))
	}
	if o, ok := a.bus.(interface{ Outage() time.Duration }); ok && o.Outage() > 0 {
		// The broker is the likely cause: say so, not the parties.
		err = fmt.Errorf("%w: no request answered for %v (--wait) since the broker came back (it was unreachable for %v in all): "+
			"requests or replies in flight when it went down were lost; restart every participant with --resume, which recomputes them",
			ErrStalled, idle.Round(time.Second), o.Outage().Round(time.Second))
	}
	a.cfg.Log.Error().Err(err).Msg("pausing the run")
	a.control(schemas.CtlCheckpoint, 0, 0, "paused: "+truncate(err.Error(), 900))
	a.res.Training = now.Sub(a.start)
	if a.phase != done {
		a.err = fmt.Errorf("aggregator: %w", err)
		a.phase = done
		close(a.fin)
	}
	return true
}
