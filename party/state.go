package party

import (
	"math/rand/v2"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// The parts of a party's state, each kept by one part of its code (the
// Party holds one of each; p.mu guards them all).

// stepState is the zeroth-order step's: the perturbed parameters, the
// direction generator and the moving average of the parameters evaluated.
type stepState struct {
	phi  float64
	wp   []float64 // w + mu u scratch
	ema  []float64 // moving average of w evaluated (Config.EMA); nil until the first step
	emaN int
	rng  *rand.Rand
	pcg  *rand.PCG // rng's source, for checkpoints
}

// wireState is the codecs and the buffers of the messages other than the
// request in hand.
type wireState struct {
	enc, dec *schemas.Codec
	rep      schemas.Reply
	ctl      schemas.Control
	ev       schemas.EvalOutput
	rows     []uint32
	msg      broker.Message
}

// stopState is the run's stop and a pause (CtlPause): no new request; the
// seal after it is countersigned, then the party saves its state and ends
// its run (pauseBy: the end of the wait for that seal). topUp: resumed
// from a paused checkpoint, the party fills its window again.
type stopState struct {
	stopping                  bool
	sealBy                    time.Time // after the stop: the end of the wait for the final checkpoint
	pausing, pauseDone, topUp bool
	pauseBy                   time.Time
}

// joinState is the party's hello and the aggregator's call it answered.
type joinState struct {
	helloSeq  uint64 // the sequence number of this party's hello
	answerSeq uint64 // the sequence number of its hello that answered a call (0: none yet)
	answered  string // the nonce of the last call it answered
}

// recovState is the checkpoints' and the resume's (checkpoint.go).
type recovState struct {
	// skipTo is the aggregator sequence the checkpoint had applied,
	// published this party's last sequence number in the stream.
	resumed bool
	skipTo  [2]uint64 // replies, controls
	// resumeFloor is the checkpoint's StreamFloor; probe the stream's
	// message count at the last checkpoint (or the resume).
	resumeFloor, probe uint64
	// probeEvalSeq is the last evaluation sequence number published
	// before probe was counted (Checkpoint.FloorEvalSeq).
	probeEvalSeq uint64
	published    [NumKinds]uint64
	ck           Checkpoint
	ckNow        bool
	ckTook       time.Duration            // the last save's snapshot, encoding and write (ckpt.Every)
	resend       []Sent                   // kept messages the stream lacks, sent again by Run
	ownHeads     map[[2]uint64]trust.Hash // after a resume (trust layer): (kind, seq) -> the head the stream gives
	// rcptInStream: after a resume, the highest receipt sequence number
	// the stream holds (countersigned again, not sent again).
	rcptInStream uint64
	has          func(k schemas.Kind, seq uint64) bool // after a resume: the stream holds this party's message seq on subject k

	// rcptLost: a receipt was countersigned (its file kept, its chain
	// moved on) and its publish failed: no checkpoint is saved from then
	// on, or a resume would skip the seal and never publish it.
	rcptLost bool
}
