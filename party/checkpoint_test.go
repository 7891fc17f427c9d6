package party

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
)

func newStarted(t *testing.T) *Party {
	p, err := New(Config{Run: "t", ID: 2, Model: model.NewLinear(16, 1), Train: dense(1000, 16), Reg: model.Nonconvex{}, Lambda: 1e-4,
		Mu: 1e-3, LR: zoo.Schedule{Eta0: 1e-2}, Batch: 8, Window: 4, Seed: 1, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	p.bus, p.ctx = &sink{}, context.Background()
	return p
}

// A checkpoint, written and read back, restores a party that applies the
// next replies and prepares the next requests bit for bit as the original
// (parameters, directions, batches, sequence numbers).
func TestCheckpointResumesBitForBit(t *testing.T) {
	a, reply := ckptRun(t)
	var buf bytes.Buffer
	if err := a.Checkpoint().Encode(&buf); err != nil {
		t.Fatal(err)
	}
	ck, err := DecodeCheckpoint(&buf)
	if err != nil {
		t.Fatal(err)
	}
	resumesBitForBit(t, ck, a, reply)
}

func TestResumeRefusesOtherParties(t *testing.T) {
	a := newStarted(t)
	a.control(&schemas.Control{Op: schemas.CtlStart})
	good := a.Checkpoint()
	for _, tc := range []struct {
		name string
		edit func(c *Checkpoint)
	}{
		{"run", func(c *Checkpoint) { c.Run = "x" }},
		{"party", func(c *Checkpoint) { c.ID = 3 }},
		{"parameters", func(c *Checkpoint) { c.W = c.W[:3] }},
		{"window", func(c *Checkpoint) { c.Ring = c.Ring[:1] }},
		{"head", func(c *Checkpoint) { c.Head = 9 }},
		{"sample", func(c *Checkpoint) {
			c.Ring = slices.Clone(c.Ring)
			c.Ring[0].IDs = []uint32{5000}
		}},
		{"random state", func(c *Checkpoint) { c.RNG = nil }},
	} {
		c := *good
		tc.edit(&c)
		if err := newStarted(t).Resume(&c); !errors.Is(err, ErrResume) {
			t.Errorf("%s: %v, want ErrResume", tc.name, err)
		}
	}
}

func FuzzDecodeCheckpoint(f *testing.F) {
	p, err := New(Config{Run: "t", ID: 2, Model: model.NewLinear(6, 1), Train: dense(50, 6), Dist: zoo.Gaussian, Mu: 1e-3,
		LR: zoo.Schedule{Eta0: 0.1}, Batch: 2, Window: 2, Seed: 7, Log: zerolog.Nop()})
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	_ = p.Checkpoint().Encode(&buf)
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCheckpoint(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrResume) {
				t.Fatalf("error %v does not wrap ErrResume", err)
			}
			return
		}
		q, _ := New(Config{Run: "t", ID: 2, Model: model.NewLinear(6, 1), Train: dense(50, 6), Dist: zoo.Gaussian, Mu: 1e-3,
			LR: zoo.Schedule{Eta0: 0.1}, Batch: 2, Window: 2, Seed: 7, Log: zerolog.Nop()})
		_ = q.Resume(c)
	})
}

// stalledCount is a bus whose broker does not answer a count (its
// connection just dropped): Count returns only when ctx is done.
type stalledCount struct {
	sink
	err error // the cause that ended Count's ctx
}

func (s *stalledCount) Count(ctx context.Context, _ string) (uint64, error) {
	<-ctx.Done()
	s.err = context.Cause(ctx)
	return 0, ctx.Err()
}

// errRunCtx is the cause of the run's ctx in TestProbeEndsWithCtx.
var errRunCtx = errors.New("the run's ctx")

// The stream count taken after a checkpoint (the next checkpoint's floor)
// ends with the run's ctx: a lost connection cancels it, and a party
// waiting out the count's own timeout instead resumed 5 s late after a
// broker crash, after the run had ended (TestKillAndResume, broker case).
// A failed count keeps the floor it had.
func TestProbeEndsWithCtx(t *testing.T) {
	p := newStarted(t)
	p.recov.probe, p.outbox.Floor = 7, 7
	// A ctx cancelled already: the count must end with it, not wait out
	// its own timeout (ckpt.ProbeWait), which the stalled count would
	// otherwise run into; a count that does not end at all hangs the test.
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errRunCtx)
	sc := &stalledCount{}
	p.probeStream(ctx, sc)
	if !errors.Is(sc.err, errRunCtx) {
		t.Errorf("the count ended by %v, not by the run's ctx", sc.err)
	}
	if p.recov.probe != 7 || p.outbox.Floor != 7 {
		t.Errorf("a failed count changed the floor: %d, %d", p.recov.probe, p.outbox.Floor)
	}
}
