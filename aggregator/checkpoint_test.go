package aggregator

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/asyrevel/asyrevel/broker"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
)

// A checkpoint, written and read back, restores an aggregator that answers
// the next requests bit for bit as the original does (head with
// parameters: its direction generator's state matters too).
func TestCheckpointResumesBitForBit(t *testing.T) {
	a, sa, next, deliver := ckptRun(t)
	var buf bytes.Buffer
	if err := a.Checkpoint().Encode(&buf); err != nil {
		t.Fatal(err)
	}
	ck, err := DecodeCheckpoint(&buf)
	if err != nil {
		t.Fatal(err)
	}
	resumesBitForBit(t, ck, a, sa, next, deliver)
}

func slicesEqual(x, y []float64) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

func TestResumeRefusesOtherRuns(t *testing.T) {
	a, _ := newTest(t, 2, []int32{1, 0, 1}, model.NewLogistic(2))
	train(a, make([]float64, 6))
	good := a.Checkpoint()
	cases := []struct {
		name string
		edit func(c *Checkpoint)
	}{
		{"run", func(c *Checkpoint) { c.Run = "other" }},
		{"parties", func(c *Checkpoint) { c.Parties = 3 }},
		{"table", func(c *Checkpoint) { c.Table = c.Table[:2] }},
		{"sequences", func(c *Checkpoint) { c.LastSeq[0] = nil }},
		{"hello sequences", func(c *Checkpoint) { c.LastSeq[2] = nil }},
		{"reply sequences", func(c *Checkpoint) { c.ReplySeq = c.ReplySeq[:1] }},
		{"random state", func(c *Checkpoint) { c.RNG = []byte("junk") }},
	}
	for _, tc := range cases {
		c := *good
		c.LastSeq = [3][]uint64{slices.Clone(good.LastSeq[0]), slices.Clone(good.LastSeq[1]), slices.Clone(good.LastSeq[2])}
		c.ReplySeq = slices.Clone(good.ReplySeq)
		tc.edit(&c)
		b, _ := newTest(t, 2, []int32{1, 0, 1}, model.NewLogistic(2))
		if err := b.Resume(&c); !errors.Is(err, ErrResume) {
			t.Errorf("%s: %v, want ErrResume", tc.name, err)
		}
	}
}

// A checkpoint file is read back without a crash whatever it holds; what
// decodes is checked by Resume.
func FuzzDecodeCheckpoint(f *testing.F) {
	a, _ := newTest(f, 2, []int32{1, 0, 1}, model.NewLogistic(2))
	train(a, make([]float64, 6))
	var buf bytes.Buffer
	_ = a.Checkpoint().Encode(&buf)
	f.Add(buf.Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCheckpoint(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrResume) {
				t.Fatalf("error %v does not wrap ErrResume", err)
			}
			return
		}
		b, _ := newTest(t, 2, []int32{1, 0, 1}, model.NewLogistic(2))
		_ = b.Resume(c)
	})
}

// floorHolds lets a resume read from the checkpoint's floor only if no
// party has more requests below it than the checkpoint accepted of it:
// a request not handled at the checkpoint but stored below the floor (a
// backlog) sends the resume back to the stream's start.
func TestFloorHolds(t *testing.T) {
	const run, q = "floor", 2
	hub := broker.NewMemoryHub()
	bus := hub.Connect("aggregator")
	defer bus.Close()
	ctx := context.Background()
	pub := func(kind schemas.Kind, m int) {
		if err := bus.Publish(ctx, &broker.Message{Subject: schemas.Subject(run, kind, m), Data: []byte{1}}); err != nil {
			t.Fatal(err)
		}
	}
	// Stream sequences 1..10: party 1's requests 1-4 at 1, 3, 5, 7;
	// party 2's 1-3 at 2, 4, 6; replies at 8, 9, 10.
	for i := range 7 {
		pub(schemas.KindOutput, 1+i%2)
	}
	for range 3 {
		pub(schemas.KindReply, 1)
	}
	for _, tc := range []struct {
		floor  uint64
		last   []uint64 // the checkpoint's last accepted request per party
		holds  bool
		reason string
	}{
		{floor: 5, last: []uint64{0, 2, 2}, holds: true},
		{floor: 5, last: []uint64{0, 1, 2}, holds: false, reason: "party 1 has 2 messages on asyrevel.floor.out.1 below"},
		{floor: 7, last: []uint64{0, 3, 2}, holds: false, reason: "party 2 has 3 messages on asyrevel.floor.out.2 below"},
		{floor: 7, last: []uint64{0, 3, 3}, holds: true},
		{floor: 11, last: []uint64{0, 4, 3}, holds: true},
		{floor: 11, last: []uint64{0, 4, 2}, holds: false, reason: "party 2"},
	} {
		a := &Aggregator{q: q, cfg: Config{Run: run}}
		r := &recovery{a: a, ctx: ctx, bus: bus, run: run, floor: tc.floor, last: tc.last}
		why, err := r.floorHolds()
		if err != nil {
			t.Fatal(err)
		}
		if (why == "") != tc.holds || !strings.Contains(why, tc.reason) {
			t.Errorf("floor %d, last %v: %q, want holds=%v (%q)", tc.floor, tc.last, why, tc.holds, tc.reason)
		}
	}
}
