package party

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/internal/ckpt"
	"github.com/asyrevel/asyrevel/internal/ckpt/ckpttest"
	"github.com/asyrevel/asyrevel/schemas"
)

// legacyFile is a party checkpoint written by the build before the
// checkpoint envelope (package ckpt): the bare gob state of ckptRun's
// party after its first 100 replies, written by that build's
// a.Checkpoint().Encode.
const legacyFile = "testdata/party-v3-bare.ckpt"

// ckptRun is a started party and the function that gives it reply i; it
// has applied the first 100.
func ckptRun(t *testing.T) (*Party, func(p *Party, i int)) {
	a := newStarted(t)
	a.control(&schemas.Control{Op: schemas.CtlStart})
	c := schemas.NewCodec()
	rep := &schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 2}, Delta: make([]float64, 8)}
	d := &delivery{subject: schemas.Subject("t", schemas.KindReply, 2)}
	reply := func(p *Party, i int) {
		r := *rep
		r.Seq = uint64(i + 1)
		r.ReqSeq = p.ring[p.head].seq
		for j := range r.Delta {
			r.Delta[j] = float64((i*7+j)%11-5) * 1e-4
		}
		d.data, _ = c.Marshal(&r)
		p.handle(context.Background(), d)
	}
	for i := range 100 {
		reply(a, i)
	}
	return a, reply
}

// A checkpoint file of the build before the envelope still resumes: it
// decodes to the state this build checkpoints of the same run, and the
// party resumed from it goes on bit for bit as the original.
func TestOldCheckpointResumes(t *testing.T) {
	ck := ckpttest.Legacy(t, legacyFile, DecodeCheckpoint)
	a, reply := ckptRun(t)
	now := a.Checkpoint()
	ck.Saved, now.Saved = time.Time{}, time.Time{}
	// What later builds record that the old file lacks: its rows' hold-out.
	now.HoldOut, now.HoldOutKnown = schemas.HoldOut{}, false
	if !reflect.DeepEqual(ck, now) {
		t.Fatalf("the old file's state differs from this build's of the same run:\n old %+v\n now %+v", ck, now)
	}
	resumesBitForBit(t, ck, a, reply)
}

// resumesBitForBit resumes a new party from ck, a checkpoint of a
// (ckptRun), and checks that it applies the next 100 replies and
// prepares the next requests bit for bit as a does.
func resumesBitForBit(t *testing.T, ck *Checkpoint, a *Party, reply func(*Party, int)) {
	t.Helper()
	b := newStarted(t)
	if err := b.Resume(ck); err != nil {
		t.Fatal(err)
	}
	for i := 100; i < 200; i++ {
		reply(a, i)
		reply(b, i)
		if !slices.Equal(a.w, b.w) || !slices.Equal(a.out.C, b.out.C) || !slices.Equal(a.out.IDs, b.out.IDs) || a.seq != b.seq {
			t.Fatalf("reply %d after the checkpoint: the parties differ", i)
		}
	}
	if a.err != nil || b.err != nil || b.stats.Steps != a.stats.Steps {
		t.Fatalf("errors %v %v, steps %d and %d (%v)", a.err, b.err, a.stats.Steps, b.stats.Steps, b.stats.Rejected)
	}
}

// A checkpoint altered or cut short is refused with a clear error, never
// resumed from: before the envelope a changed byte in the parameters
// decoded to another state without a word.
func TestDamagedCheckpointRefused(t *testing.T) {
	a, _ := ckptRun(t)
	good := ckpttest.Encoded(t, a.Checkpoint(), DecodeCheckpoint)
	// The state altered (one parameter's sign), the trailer kept.
	alt := a.Checkpoint()
	alt.W[0] = -alt.W[0]
	var altBuf bytes.Buffer
	if err := alt.Encode(&altBuf); err != nil {
		t.Fatal(err)
	}
	flip := altBuf.Bytes()
	if len(flip) != len(good) || bytes.Equal(flip, good) {
		t.Fatal("the altered state does not encode to as many bytes")
	}
	copy(flip[len(flip)-40:], good[len(good)-40:])
	var agg bytes.Buffer
	if err := ckpt.Encode(&agg, "aggregator", CheckpointVersion, a.Checkpoint()); err != nil {
		t.Fatal(err)
	}
	ckpttest.Refused(t, DecodeCheckpoint, ErrResume,
		ckpttest.Damaged{Name: "one byte changed", Data: flip, Want: ckpt.ErrDamaged},
		ckpttest.Damaged{Name: "cut short", Data: good[:len(good)-10], Want: ckpt.ErrDamaged},
		ckpttest.Damaged{Name: "the aggregator's", Data: agg.Bytes(), Want: ckpt.ErrFormat})
}
