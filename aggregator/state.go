package aggregator

import (
	"math/rand/v2"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/internal/ratelog"
	"github.com/asyrevel/asyrevel/schemas"
)

// The parts of the aggregator's state, each kept by one part of its code
// (the Aggregator holds one of each; a.mu guards them all).

// headStep is the head's own zeroth-order step: its perturbed parameters
// and direction, the losses of the current request and the direction
// generator.
type headStep struct {
	w0p, u0 []float64
	hh      []float64 // h per sample of the current request
	rng     *rand.Rand
	pcg     *rand.PCG // rng's source, for checkpoints
	phi0    float64
}

func newHeadStep(np, maxBatch int, seed uint64) headStep {
	s := headStep{w0p: make([]float64, np), u0: make([]float64, np), hh: make([]float64, maxBatch), pcg: newPCG(seed)}
	s.rng = rand.New(s.pcg)
	return s
}

// joinState is the join phase's (join.go).
type joinState struct {
	initAt   []uint32 // per party: next expected init First; NTrain when complete
	rem      int      // parties whose initial pass is not complete
	progress time.Time
	// called is, per party, the sequence number of the hello the
	// aggregator last called; nonce is its call's nonce, and a replayer
	// (adoptCall) takes the log's.
	called    []uint64
	nonce     string
	adoptCall bool
	refused   []string // per party: why its latest hello was refused ("" = not refused)
}

func newJoinState(q int) joinState {
	return joinState{initAt: make([]uint32, q+1), rem: q, called: make([]uint64, q+1), nonce: newCallNonce(), refused: make([]string, q+1)}
}

// evalState is the evaluation rounds' (cadence.go).
type evalState struct {
	tables [2][]float64 // train and test eval tables
	cur    *round
	rounds uint32
	// cost is how long the last evaluation round took, request to
	// score, less any broker outage meanwhile; prev the round's before:
	// rounds are spaced at least evalSpacing times the lesser apart
	// (cadence.go). done and sum count the rounds whose cost was
	// measured and their total (Snapshot).
	cost   time.Duration
	prev   time.Duration
	done   int64
	sum    time.Duration
	lastPt struct {
		at   time.Duration
		msgs int64
	}
	silent []bool // by party: it let an evaluation round down while training (silentWait)
	bytes  int64  // received in the evaluation rounds (not the initial pass)
	here   int64  // evaluation rounds begun by this process (not before a resume)
	// at and steps are the training time and the steps when the last
	// round was requested.
	at    time.Duration
	steps int64
}

// waitState is what the waits report and watch: the last notice logged,
// per party the answered requests at it, the latest rejections and
// requests, and the steps a stall is measured from.
type waitState struct {
	lastNotice     time.Time
	noticeSteps    []uint32
	lastReject     []string // per party: the latest rejection, for the wait messages
	rejectLog      *ratelog.Limiter
	lastOutageNote time.Time   // when the broker's outage was last reported
	lastReq        []time.Time // by party: when its latest valid request came
	stallSteps     int64
	stallSince     time.Time
}

func newWaitState(q int) waitState {
	return waitState{noticeSteps: make([]uint32, q+1), lastReject: make([]string, q+1), rejectLog: ratelog.NewRejections(), lastReq: make([]time.Time, q+1)}
}

// wireState is the codecs and the decoding buffers of the messages in
// hand.
type wireState struct {
	enc, dec  *schemas.Codec
	ev        schemas.EvalOutput
	hel       schemas.Hello
	msg       broker.Message
	cause     []byte          // the digest of the request being answered (Reply.Cause)
	dlv       broker.Delivery // the delivery being handled
	subjReply []string        // by party: its reply subject
}

// stepStats is the staleness of the replies (their sum and count, and by
// party) and the traffic.
type stepStats struct {
	staleSum float64
	staleN   int64
	stalePer []partyStale
	through  int64 // bytes received and published, with the stream's overhead (room.go)
	room     roomLine
}

// recovState is the checkpoints' and the recovery's (checkpoint.go,
// recovery.go).
type recovState struct {
	// replaying: a request answered before the crash is applied again,
	// and its reply must reproduce replayWant.
	replaying     bool
	replayWant    []byte
	trainedBefore time.Duration // the training time before the resume
	ck            Checkpoint
	ckNow         bool
	ckTook        time.Duration // the last save's snapshot, encoding and write (ckpt.Every)
	probe         uint64        // the stream's message count at the last checkpoint
	// nears are the latest counts of the stream taken with the parties'
	// requests (nearProbe), oldest first, and probedAt when the stream
	// was last counted: they make the checkpoint's near floor
	// (Checkpoint.NearFloor).
	nears        []nearCount
	probedAt     time.Time
	resumeOutbox []Sent
	// held are the replies the stream lost with their requests, by
	// (party, request), sent again once the request comes again
	// (releaseHeld).
	held        map[[2]uint64]Sent
	heldSince   time.Time
	resumeFloor uint64     // the checkpoint's StreamFloor
	resumeNear  uint64     // the checkpoint's NearFloor
	restFrom    uint64     // after a resume: where the hellos and evaluations go on (1: the start)
	reqFrom     uint64     // after a resume: where the requests go on (0: from the floor; recovery.liveFrom)
	recovered   *recovered // what recovery verified (trust layer)
	goneOn      bool       // after a resume: a request was answered live (wentOn)
}

// pubState is what the aggregator published: its last messages and, without
// the trust layer, its sequence numbers.
type pubState struct {
	outbox   broker.SentRing
	replySeq []uint64 // by party: the last reply's sequence number, without trust
	ctlSeq   uint64   // the last control's sequence number, without trust
}

// stopState is how the run ends.
type stopState struct {
	closed  bool   // the result is taken: deliveries are only acked
	reason  string // why training stopped (Result.StopReason)
	pausing bool   // Pause: no new evaluation round, no stop
}
