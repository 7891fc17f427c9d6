package aggregator

import (
	"bytes"
	"context"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/internal/ckpt"
	"github.com/asyrevel/asyrevel/internal/ckpt/ckpttest"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
)

// legacyFile is an aggregator checkpoint written by the build before the
// checkpoint envelope (package ckpt): the bare gob state of ckptRun's
// aggregator after its first 300 requests, written by that build's
// a.Checkpoint().Encode.
const legacyFile = "testdata/aggregator-v3-bare.ckpt"

// ckptRun is a training aggregator (4 parties, 500 samples) and a seeded
// stream of requests, with the function that delivers one; it has
// answered the first 300.
func ckptRun(t *testing.T) (a *Aggregator, s *sink, next func() (int, []byte), deliver func(*Aggregator, int, []byte)) {
	const n, q = 500, 4
	labels := make([]int32, n)
	for i := range labels {
		labels[i] = int32(i % 2)
	}
	a, s = newTest(t, q, labels, model.NewLogisticBias(q))
	train(a, make([]float64, n*q))
	r := rand.New(rand.NewPCG(1, 2))
	c := schemas.NewCodec()
	seqs := make([]uint64, q+1)
	next = func() (int, []byte) {
		m := 1 + r.IntN(q)
		seqs[m]++
		o := &schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: uint16(m), Seq: seqs[m]},
			IDs: make([]uint32, 8), C: make([]float64, 8), CHat: make([]float64, 8)}
		for j := range o.IDs {
			o.IDs[j] = uint32(r.IntN(n))
			o.C[j] = r.NormFloat64()
			o.CHat[j] = o.C[j] + 1e-3*r.NormFloat64()
		}
		b, _ := c.Marshal(o)
		return m, b
	}
	deliver = func(a *Aggregator, m int, b []byte) {
		a.handleOutputs(context.Background(), &delivery{subject: schemas.Subject("t", schemas.KindOutput, m), data: b})
	}
	for range 300 {
		m, data := next()
		deliver(a, m, data)
	}
	return a, s, next, deliver
}

// A checkpoint file of the build before the envelope still resumes: it
// decodes to the state this build checkpoints of the same run, and the
// aggregator resumed from it answers the next requests bit for bit as the
// original.
func TestOldCheckpointResumes(t *testing.T) {
	ck := ckpttest.Legacy(t, legacyFile, DecodeCheckpoint)
	a, sa, next, deliver := ckptRun(t)
	now := a.Checkpoint()
	ck.Saved, now.Saved = time.Time{}, time.Time{}
	if !reflect.DeepEqual(ck, now) {
		t.Fatalf("the old file's state differs from this build's of the same run:\n old %+v\n now %+v", ck, now)
	}
	resumesBitForBit(t, ck, a, sa, next, deliver)
}

// resumesBitForBit resumes a new aggregator from ck, a checkpoint of a
// (ckptRun), and checks that it answers the next 300 requests bit for
// bit as a does.
func resumesBitForBit(t *testing.T, ck *Checkpoint, a *Aggregator, sa *sink, next func() (int, []byte), deliver func(*Aggregator, int, []byte)) {
	t.Helper()
	b, sb := newTest(t, a.q, a.cfg.Labels, model.NewLogisticBias(a.q))
	if err := b.Resume(ck); err != nil {
		t.Fatal(err)
	}
	b.resumed = nil // answer as a live run does (the recovery's skip needs Run)
	for i := range 300 {
		m, data := next()
		deliver(a, m, data)
		deliver(b, m, data)
		if !bytes.Equal(sa.last, sb.last) {
			t.Fatalf("request %d after the checkpoint: the replies differ", i)
		}
	}
	if !slicesEqual(a.w0, b.w0) || a.res.Steps != b.res.Steps {
		t.Fatalf("head %v and %v, steps %d and %d", a.w0, b.w0, a.res.Steps, b.res.Steps)
	}
}

// A checkpoint altered or cut short is refused with a clear error, never
// resumed from: before the envelope a changed byte in the table of
// outputs decoded to another state without a word.
func TestDamagedCheckpointRefused(t *testing.T) {
	a, _, _, _ := ckptRun(t)
	good := ckpttest.Encoded(t, a.Checkpoint(), DecodeCheckpoint)
	// The table of outputs: 500 x 4 float64s (16 kB) in the middle.
	flip := bytes.Clone(good)
	flip[len(flip)/2] ^= 0x10
	var party bytes.Buffer
	must(t, ckpt.Encode(&party, "party", CheckpointVersion, a.Checkpoint()))
	ckpttest.Refused(t, DecodeCheckpoint, ErrResume,
		ckpttest.Damaged{Name: "one byte changed", Data: flip, Want: ckpt.ErrDamaged},
		ckpttest.Damaged{Name: "cut short", Data: good[:len(good)-100], Want: ckpt.ErrDamaged},
		ckpttest.Damaged{Name: "a party's", Data: party.Bytes(), Want: ckpt.ErrFormat})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
