package run

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/serve"
)

// tinyTable is a small table: 300 rows of 12 columns, 3 parties, 30 rows
// held out, so that an epoch is 3 * 270 / 64 = 12.7 requests.
func tinyTable() *dataset.SyntheticConfig {
	return &dataset.SyntheticConfig{Samples: 300, TestSamples: 100, Features: 12, Classes: 2, Noise: 0.3, Seed: 11}
}

// Issue 34: a small table was evaluated once in hundreds of epochs (a
// wine run stopped with 3 rows in curve.csv). A run given no length now
// evaluates at least once an epoch, and its patience is said in epochs.
func TestEvaluatesEveryEpoch(t *testing.T) {
	if testing.Short() {
		t.Skip("a whole run")
	}
	out := t.TempDir()
	cfg := New(func(c *Config) {
		c.Synthetic = tinyTable()
		c.Parties = 3
		c.Seed = 2
		c.Out = out
	})
	s, err := Train(context.Background(), cfg, Hooks{Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	epoch := math.Ceil(3 * float64(s.Samples) / float64(s.Batch))
	if s.StoppedBy != "patience" || s.HeldOutRows != 30 || s.Samples != 270 {
		t.Fatalf("stopped_by %q, %d rows held out of %d: want the patience rule, 30 of 300 rows", s.StoppedBy, s.HeldOutRows, s.Samples+s.HeldOutRows)
	}
	var worst int64
	for i := 1; i < len(s.Curve); i++ {
		worst = max(worst, s.Curve[i].Steps-s.Curve[i-1].Steps)
	}
	t.Logf("%d evaluations over %d steps (%.1f epochs of %g requests), the longest gap %d steps; training waited %.2f s of %.2f s for them",
		len(s.Curve), s.Steps, float64(s.Steps)/epoch, epoch, worst, s.EvalWaitSeconds, s.TrainSeconds)
	if float64(worst) > epoch {
		t.Errorf("%d steps between two evaluations, more than an epoch (%g)", worst, epoch)
	}
	if e := s.EarlyStop; e == nil || e.Watched != "held-out" || e.Patience < float64(MinPatienceSteps)*3/epoch {
		t.Errorf("early stop %+v: want the held-out loss watched, with at least %d requests a party of patience", e, MinPatienceSteps)
	}
	if !strings.Contains(s.StopWords(), fmt.Sprintf("at least %d requests a party", MinPatienceSteps)) {
		t.Errorf("the words do not give the patience in force: %s", s.StopWords())
	}
}

// lateEval is party 1's adversary in TestKeptModelIsBestOnHeldOut: it
// corrupts what it sends for evaluation, never its model. From round
// from on, its outputs on the held-out rows (the first held of the test
// split) are wrong, so the held-out loss of the later evaluations is
// worse than an earlier one's; before round from, its outputs on the
// test set's rows are wrong, so the test set would choose a late round.
type lateEval struct {
	held, from int
	round      int // rounds answered (counted at their training split)
}

func (a *lateEval) Batch(uint64, []uint32, int) int                { return 0 }
func (a *lateEval) Request(uint64, []uint32, []float64, []float64) {}
func (a *lateEval) Eval(s schemas.Split, first int, c []float64) {
	switch s {
	case schemas.SplitTrain:
		if first == 0 {
			a.round++
		}
	case schemas.SplitTest:
		for j := range c {
			if held := first+j < a.held; held == (a.round >= a.from) {
				c[j] = -5*c[j] + 3
			}
		}
	}
}

// The model kept is the evaluation best on the held-out rows, never the
// test set's choice, and it is what every participant saves: the saved
// models score the kept evaluation's held-out loss.
func TestKeptModelIsBestOnHeldOut(t *testing.T) {
	if testing.Short() {
		t.Skip("a whole run")
	}
	out := t.TempDir()
	const from = 6
	adv := &lateEval{held: 60, from: from}
	cfg := New(func(c *Config) {
		c.Synthetic = tinyTable()
		c.Synthetic.Samples = 600
		c.Parties = 3
		c.Epochs = 14
		c.HoldOut = 0.1
		c.Seed = 5
		c.Out = out
	})
	s, err := Train(context.Background(), cfg, Hooks{Log: testLog(t), Adversaries: map[int]party.Adversary{1: adv}})
	if err != nil {
		t.Fatal(err)
	}
	k := s.Kept
	if k == nil || !k.Best || k.HeldOutLoss == nil || k.Last == nil || k.Last.HeldOutLoss == nil {
		t.Fatalf("kept %+v: want the best evaluation on the held-out rows, and the last one's figures", k)
	}
	// The best round on the held-out rows, and the test set's choice.
	var best, byTest aggregator.Point
	for _, pt := range s.Curve {
		if len(pt.Stale) > 0 || pt.Round == 0 {
			continue
		}
		if best.Round == 0 || pt.HeldOutLoss < best.HeldOutLoss {
			best = pt
		}
		if byTest.Round == 0 || pt.TestLoss < byTest.TestLoss {
			byTest = pt
		}
	}
	t.Logf("%d evaluations; kept round %d (held-out loss %.4f, test loss %.4f); the last's held-out loss %.4f; the test set's pick: round %d",
		len(s.Curve), k.Round, *k.HeldOutLoss, *k.TestLoss, *k.Last.HeldOutLoss, byTest.Round)
	if k.Round != best.Round || *k.HeldOutLoss != best.HeldOutLoss {
		t.Errorf("kept round %d (held-out loss %g), the best on the held-out rows is round %d (%g)", k.Round, *k.HeldOutLoss, best.Round, best.HeldOutLoss)
	}
	if !(*k.Last.HeldOutLoss > *k.HeldOutLoss) {
		t.Fatalf("the last evaluation (held-out loss %g) is not worse than the kept round %d's (%g): the test shows nothing", *k.Last.HeldOutLoss, k.Round, *k.HeldOutLoss)
	}
	if int(k.Round) >= from || int(byTest.Round) < from {
		t.Errorf("kept round %d, the test set's pick round %d: the held-out rows must choose a round before %d, the test set one after", k.Round, byTest.Round, from)
	}
	if s.TestAccuracy != *k.TestAccuracy || s.TrainLoss != *k.TrainLoss {
		t.Errorf("summary: test accuracy %g, train loss %g; the kept model's %g, %g", s.TestAccuracy, s.TrainLoss, *k.TestAccuracy, *k.TrainLoss)
	}
	// The saved models, scored on the held-out rows, give the kept
	// round's loss (the evaluations' test split travels as float64).
	d, err := LoadData(&cfg, RoleAll)
	if err != nil {
		t.Fatal(err)
	}
	if d.HeldOut != 60 {
		t.Fatalf("%d rows held out, want 60", d.HeldOut)
	}
	loss := savedLoss(t, out, d, d.HeldOut)
	if math.Abs(loss-*k.HeldOutLoss) > 1e-9*math.Abs(*k.HeldOutLoss) {
		t.Errorf("the saved models' held-out loss is %.12g, the kept round's %.12g (the last's %.12g)", loss, *k.HeldOutLoss, *k.Last.HeldOutLoss)
	}
}

// savedLoss scores the models saved in out on the first rows of d's test
// split: the head's mean loss.
func savedLoss(t *testing.T, out string, d *Data, rows int) float64 {
	t.Helper()
	ctx := context.Background()
	dir := ModelsDir(out)
	agg, err := serve.Load(filepath.Join(dir, serve.FileName(0)))
	if err != nil {
		t.Fatal(err)
	}
	head, err := agg.Head()
	if err != nil {
		t.Fatal(err)
	}
	q := len(d.Blocks)
	ids := make([]uint32, rows)
	for i := range ids {
		ids[i] = uint32(i)
	}
	c := make([]float64, rows*q)
	for m := 1; m <= q; m++ {
		f, err := serve.Load(filepath.Join(dir, serve.FileName(m)))
		if err != nil {
			t.Fatal(err)
		}
		local, closeModel, err := f.Local(ctx)
		if err != nil {
			t.Fatal(err)
		}
		o := make([]float64, rows*local.OutDim())
		local.Forward(f.Params, d.PartTest[m-1], ids, o)
		closeModel()
		for i := range rows {
			c[i*q+m-1] = o[i]
		}
	}
	var sum float64
	for i := range rows {
		sum += head.Loss(agg.Params, c[i*q:(i+1)*q], d.TestY[i])
	}
	return sum / float64(rows)
}

// writeRaw writes a 3-class CSV whose columns are raw, on scales from 0.36
// to 750 (issue 34's: a wine-like table without --scale).
func writeRaw(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "raw.csv")
	r := rand.New(rand.NewPCG(3, 4))
	scales := []float64{13, 2, 2.4, 19, 100, 2.3, 2, 0.36, 1.6, 5, 1, 2.6, 750}
	var b strings.Builder
	b.WriteString("label,f0,f1,f2,f3,f4,f5,f6,f7,f8,f9,f10,f11,f12\n")
	for range 178 {
		c := r.IntN(3)
		fmt.Fprintf(&b, "%d", c)
		for _, s := range scales {
			fmt.Fprintf(&b, ",%.3f", s*(1+0.15*float64(c))+r.NormFloat64()*0.1*s)
		}
		b.WriteString("\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Issue 34: a raw 3-class CSV under the budget profile sat at a training
// loss of 43 (1.1 at the start) for the whole --duration 5m. A run whose
// training loss stays far above its start stops, with an error that
// names the likely cause, whatever its length. (Its evaluations come
// once an epoch since it holds rows out: a run of a given length without
// them is evaluated every second or so, and stops as stuck that late.)
func TestStuckRunStops(t *testing.T) {
	if testing.Short() {
		t.Skip("a whole run")
	}
	out := t.TempDir()
	s, err := Train(context.Background(), New(func(c *Config) {
		c.Data = writeRaw(t)
		c.Parties = 4
		c.MaxSteps = 20000
		c.HoldOut = 0.1
		c.Privacy = "auc=0.6,profile=budget"
		c.NoLeakage = true
		c.Out = out
	}), Hooks{Log: testLog(t)})
	if !errors.Is(err, ErrStuck) || s == nil {
		t.Fatalf("err %v (summary %v): want ErrStuck with the summary", err, s != nil)
	}
	t.Logf("%v; %d steps, train loss %.4g", err, s.Steps, s.TrainLoss)
	if s.StoppedBy != "stuck" || !strings.Contains(err.Error(), "--scale standard") || !strings.Contains(s.StopWords(), "--scale standard") {
		t.Errorf("stopped_by %q, error %q, words %q: want stuck, naming --scale standard", s.StoppedBy, err, s.StopWords())
	}
	if s.Steps >= 20000 {
		t.Errorf("ran its %d steps", s.Steps)
	}
	if _, err := os.Stat(filepath.Join(out, "summary.json")); err != nil {
		t.Errorf("no summary written: %v", err)
	}
}

// The model kept survives a pause and a resume: the aggregator's choice
// and every party's copies are in their checkpoints, and the models saved
// at the end are those of one evaluation round, the best on the held-out
// rows of the whole run.
func TestKeptModelAcrossResume(t *testing.T) {
	if testing.Short() {
		t.Skip("a whole run, twice")
	}
	out := t.TempDir()
	cfg := roomyConfig(t, out, "keptresume")
	cfg.HoldOut = 0.1
	cfg.Duration = time.Minute
	// The pause comes after the fourth evaluation, whatever the time.
	pause := make(chan struct{})
	evals := 0
	s, err := Train(context.Background(), cfg, Hooks{Pause: pause, OnPoint: func(pt aggregator.Point) {
		if evals++; evals == 4 {
			close(pause)
		}
	}})
	if !errors.Is(err, ErrInterrupted) || s == nil {
		t.Fatalf("paused run: %v", err)
	}
	before := s.Curve[len(s.Curve)-1].Round
	// After the resume, party 1 evaluates its held-out rows negated: every
	// later evaluation is worse on them, and the best stays one from
	// before the pause, whose copies come from the checkpoints.
	held := 0
	resumed := cfg
	resumed.Resume = true
	resumed.Duration = time.Duration(s.TrainSeconds*float64(time.Second)) + time.Second
	partyData := map[int]func(train, test *dataset.Matrix) (*dataset.Matrix, *dataset.Matrix){
		1: func(train, test *dataset.Matrix) (*dataset.Matrix, *dataset.Matrix) {
			neg := *test
			neg.Values = slices.Clone(test.Values)
			held = s.HeldOutRows
			for k := range neg.Values[:neg.Indptr[held]] {
				neg.Values[k] = -neg.Values[k]
			}
			return train, &neg
		},
	}
	s, err = Train(context.Background(), resumed, Hooks{PartyData: partyData})
	if err != nil {
		t.Fatalf("resumed: %v", err)
	}
	k := s.Kept
	if s.Resumed == nil || k == nil || !k.Best || k.HeldOutLoss == nil {
		t.Fatalf("resumed %v, kept %+v: want the best evaluation kept", s.Resumed != nil, k)
	}
	var best aggregator.Point
	for _, pt := range s.Curve {
		if len(pt.Stale) == 0 && pt.Round != 0 && (best.Round == 0 || pt.HeldOutLoss < best.HeldOutLoss) {
			best = pt
		}
	}
	t.Logf("%d evaluations; kept round %d of %d (held-out loss %.5f, after %d steps; resumed at %d)", len(s.Curve), k.Round, s.Curve[len(s.Curve)-1].Round, *k.HeldOutLoss, k.Steps, s.Resumed.FromSteps)
	if k.Round != best.Round {
		t.Errorf("kept round %d, the best on the held-out rows is round %d", k.Round, best.Round)
	}
	if held == 0 || k.Round > before || k.Last == nil || !(*k.Last.HeldOutLoss > *k.HeldOutLoss) {
		t.Fatalf("kept round %d, %d rounds before the pause, %d rows held out: want a round from before the pause, better than the last", k.Round, before, held)
	}
	d, err := LoadData(&cfg, RoleAll)
	if err != nil {
		t.Fatal(err)
	}
	if loss := savedLoss(t, out, d, d.HeldOut); math.Abs(loss-*k.HeldOutLoss) > 1e-9*math.Abs(*k.HeldOutLoss) {
		t.Errorf("the saved models' held-out loss is %.12g, the kept round's %.12g", loss, *k.HeldOutLoss)
	}
}
