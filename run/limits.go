package run

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/asyrevel/asyrevel/align"
	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// The bounds of a run's messages. Every stream the project makes refuses a
// message larger than its run's largest (JetStream's MaxMsgSize), and a
// broker the project runs refuses it on the connection (max_payload), so
// that a key holder cannot fill the log with a few huge messages. The
// largest message is measured, not guessed: the largest message of each
// kind the run can send is encoded with the real codec, every float as a
// float64 (the widest the wire carries), its headers added.

// headerRoom bounds the NATS headers of a message besides a checkpoint: the
// signature (Asy-Sig: signer, chain head and Ed25519 signature, base64url),
// the previous head (Asy-Prev) and the header block's framing. Measured:
// 207 bytes.
const headerRoom = 1 << 10

// MaxMessage is the largest message a run of cfg sends, headers included,
// with a margin (an eighth, and 16 KiB): a request or a reply of its
// largest batch, an evaluation chunk of party.DefaultChunk samples, a
// hello, a control, the aggregator's seal (a checkpoint of every subject
// of the run, in a header) and a party's receipt of it. The run's stream
// stores nothing larger, and the embedded broker takes nothing larger.
// An 8-party a9a run at batch 256: 35 KiB (it was 1 MiB at least, and
// 20 junk messages of 1,046,576 bytes were stored).
func MaxMessage(cfg *Config) int32 { return withMargin(largestMessage(&job{Config: *cfg})) }

// largestMessage is the largest message a run of cfg sends, headers
// included, without MaxMessage's margin.
func largestMessage(cfg *job) int {
	var subjects []string
	if cfg.trust != nil && cfg.trust.roster != nil {
		subjects = cfg.trust.roster.AllSubjects()
	} else {
		subjects = runSubjects(cfg.Run, cfg.Parties)
	}
	return max(trainingMessage(max(cfg.Batch, cfg.MaxBatch, 1), max(cfg.K, 1)), sealMessage(cfg.Run, subjects))
}

// ErrMessageBound reports a run whose largest message its broker or its
// stream would refuse.
var ErrMessageBound = errors.New("the run's messages are larger than its broker takes")

// checkRoom refuses at once a run whose largest message the broker of b
// (its max_payload) or the run's stream (its MaxMsgSize) would refuse:
// otherwise the first such message would stop the run midway.
func checkRoom(ctx context.Context, b *broker.JetStream, cfg *job) error {
	need := largestMessage(cfg)
	fix := fmt.Sprintf("start the run's broker with --max-msg %d or more (asyrevel broker --roster; keys server-config --max-msg for a stock server's max_payload), or a smaller --batch", need)
	if mp := b.Conn().MaxPayload(); mp > 0 && int64(need) > mp {
		return fmt.Errorf("%w: a message of this run takes up to %d bytes (batch %d, k %d, %d parties), and the broker takes at most %d (its max_payload): %s",
			ErrMessageBound, need, max(cfg.Batch, cfg.MaxBatch), max(cfg.K, 1), cfg.Parties, mp, fix)
	}
	if m, err := b.MaxMsgSize(ctx); err == nil && m > 0 && need > int(m) {
		return fmt.Errorf("%w: a message of this run takes up to %d bytes (batch %d, k %d, %d parties), and the run's stream stores at most %d: %s",
			ErrMessageBound, need, max(cfg.Batch, cfg.MaxBatch), max(cfg.K, 1), cfg.Parties, m, fix)
	}
	return nil
}

// RosterMaxMessage is the largest message a run of roster r sends, for a
// broker that knows the run by its roster alone (asyrevel broker
// --roster, keys server-config): the alignment's chunks (align.ChunkItems
// elements of 32 bytes: 512 KiB), which share the run's stream with
// training, its seals, and training's messages up to the size of an
// alignment chunk (an evaluation chunk at k = 16, a request of 16,384
// samples at k = 1), with MaxMessage's margin: 594 KiB for a small
// roster. A run with larger messages (a batch over about 26,000 samples)
// needs a broker started with a larger bound; its participants say so at
// once (checkRoom).
func RosterMaxMessage(r *trust.Roster) int32 {
	alignChunk := alignMessage(align.ChunkItems * schemas.AlignElementSize)
	return withMargin(max(alignChunk, trainingMessage(1, 16), sealMessage(r.Run, r.AllSubjects())))
}

// withMargin adds MaxMessage's margin to n bytes, within an int32.
func withMargin(n int) int32 {
	return int32(min(n+n/8+16<<10, math.MaxInt32))
}

// trainingMessage is the largest training message of a run whose requests
// carry at most batch samples of k outputs: a request, its reply, an
// evaluation chunk, a hello or a control, with headerRoom.
func trainingMessage(batch, k int) int {
	c := schemas.NewCodec()
	c.Wide = true
	size := func(m schemas.Message) int {
		b, err := c.Marshal(m)
		if err != nil {
			panic(err) // the messages below are well formed
		}
		return len(b)
	}
	head := schemas.Header{Version: schemas.Version, Party: math.MaxUint16, Seq: math.MaxUint64}
	ids := make([]uint32, batch)
	for i := range ids {
		ids[i] = math.MaxUint32 - uint32(i) // no run of ids packs smaller
	}
	vals := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = math.Pi * float64(i+1) // no value narrows to a float32
		}
		return v
	}
	chunk := party.DefaultChunk
	n := max(
		size(&schemas.PartyOutput{Header: head, IDs: ids, C: vals(batch * k), CHat: vals(batch * k)}),
		// Every field of a reply at once: more than any reply carries.
		size(&schemas.Reply{Header: head, ReqSeq: math.MaxUint64, H: vals(batch), HBar: vals(batch), Delta: vals(batch),
			Grad: vals(batch * k), Cause: make([]byte, schemas.DigestSize), Staleness: math.MaxUint32, Mean: true}),
		size(&schemas.EvalOutput{Header: head, Round: math.MaxUint32, Split: schemas.SplitTest, First: math.MaxUint32, Total: math.MaxUint32, C: vals(chunk * k)}),
		size(&schemas.Hello{Header: head, Model: strings.Repeat("m", 64), InDim: math.MaxUint32, OutDim: math.MaxUint32,
			NTrain: math.MaxUint32, NTest: math.MaxUint32, PublicKey: strings.Repeat("k", 128), IDHash: strings.Repeat("h", 128)}),
	)
	return max(n+headerRoom, controlMessage())
}

// controlMessage is the size of the largest control but a seal's header:
// a reason of the most bytes a control carries, headerRoom included.
func controlMessage() int {
	b, err := schemas.NewCodec().Marshal(&schemas.Control{Header: schemas.Header{Version: schemas.Version, Party: math.MaxUint16, Seq: math.MaxUint64},
		Op: schemas.CtlRefuse, Round: math.MaxUint32, Splits: 3, Reason: strings.Repeat("r", 1024), BatchSeed: math.MaxUint64})
	if err != nil {
		panic(err)
	}
	return len(b) + headerRoom
}

// alignMessage is the size of an alignment chunk of data bytes, headers
// included.
func alignMessage(data int) int {
	b, err := schemas.MarshalAlign(nil, &schemas.AlignMsg{Header: schemas.Header{Version: schemas.Version, Party: math.MaxUint16, Seq: math.MaxUint64},
		Phase: schemas.AlignSet, Total: math.MaxUint64, Offset: math.MaxUint64, Spec: strings.Repeat("s", 512),
		Width: math.MaxUint32, Features: math.MaxUint32, Parties: math.MaxUint32, Data: make([]byte, data)})
	if err != nil {
		panic(err)
	}
	return len(b) + headerRoom
}

// sealMessage is the size of the aggregator's seal control, a checkpoint
// of subjects in its header, or of a party's receipt of it, whichever is
// larger, headers included (0 for a run id a checkpoint cannot carry).
func sealMessage(run string, subjects []string) int {
	subjects = subjects[:min(len(subjects), trust.MaxEntries)]
	entries := make([]trust.Entry, len(subjects))
	for i, s := range subjects {
		entries[i] = trust.Entry{Subject: s, Seq: math.MaxUint64, StreamSeq: math.MaxUint64}
	}
	c, err := trust.NewCheckpoint(run, math.MaxUint64, true, time.Unix(0, math.MaxInt64), math.MaxUint64, entries)
	if err != nil {
		return 0
	}
	hv, err := trust.EncodeCheckpointHeader(c)
	if err != nil {
		return 0
	}
	ctl := len(trust.CheckpointHeader) + len(hv) + controlMessage()
	rc, err := trust.AppendReceiptMessage(nil, math.MaxUint64, &trust.Receipt{Checkpoint: *c, Party: trust.PartyID(schemas.MaxParties)})
	if err != nil {
		return ctl
	}
	return max(ctl, len(rc)+headerRoom)
}

// runSubjects are the subjects of a run of q parties, as its roster has
// them (trust.Roster.AllSubjects; a test checks), for a run without keys.
func runSubjects(run string, q int) []string {
	out := []string{schemas.Subject(run, schemas.KindControl, 0), schemas.ScoreSubject(run)}
	for m := 1; m <= q; m++ {
		out = append(out,
			schemas.Subject(run, schemas.KindHello, m), schemas.Subject(run, schemas.KindOutput, m),
			schemas.Subject(run, schemas.KindEval, m), schemas.Subject(run, schemas.KindReply, m),
			trust.ReceiptSubject(run, m), schemas.AlignSubject(run, m), schemas.AlignHubSubject(run, m),
			schemas.ScoredSubject(run, m))
	}
	return out
}
