package privacy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/schemas"
)

// synthetic is a transcript with known answers: n samples, labels y, the
// other parties' sum z_other per sample, the attacker's outputs c, and a
// logistic head (no intercept).
type synthetic struct {
	n      int
	labels []int32
	others []float64
	rng    *rand.Rand
}

func newSynthetic(n int, seed uint64) *synthetic {
	s := &synthetic{n: n, rng: rand.New(rand.NewPCG(seed, 7))}
	for range n {
		s.labels = append(s.labels, int32(s.rng.IntN(2)))
		s.others = append(s.others, s.rng.NormFloat64())
	}
	return s
}

// loss is the logistic head's loss of sample i with the attacker's output c.
func (s *synthetic) loss(i int, c float64) float64 {
	h := model.NewLogistic(2)
	return h.Loss(nil, []float64{c, s.others[i]}, s.labels[i])
}

// view builds requests of batch b with random c and c_hat; format is
// "h,h_bar", "delta" or "mean"; noise is added to every value sent; if
// single, only one sample per request is perturbed (the active attacker).
func (s *synthetic) view(reqs, b int, format string, noise float64, single bool) *View {
	v := &View{Run: "syn", Parties: []int{1}, K: 1, NTrain: s.n, Format: format}
	for r := range reqs {
		q := Request{Party: 1, Seq: uint64(r + 1), StreamSeq: uint64(r + 1), Replied: true}
		var sum float64
		for j := range b {
			i := s.rng.IntN(s.n)
			c := 0.3 * s.rng.NormFloat64()
			dc := 1e-3 * s.rng.NormFloat64()
			if single && j != 0 {
				dc = 0
			}
			q.IDs, q.C, q.CHat = append(q.IDs, uint32(i)), append(q.C, c), append(q.CHat, c+dc)
			h, hb := s.loss(i, c), s.loss(i, c+dc)
			switch format {
			case "h,h_bar":
				q.H, q.HBar = append(q.H, h), append(q.HBar, hb)
			case "delta":
				q.Delta = append(q.Delta, hb-h+noise*s.rng.NormFloat64())
			case "mean":
				sum += hb - h
			}
		}
		if format == "mean" {
			q.Mean, q.Delta = true, []float64{sum/float64(b) + noise*s.rng.NormFloat64()}
		}
		v.Requests = append(v.Requests, q)
	}
	return v
}

func score(t *testing.T, inf *LabelInference, err error, v *View, labels []int32, others map[uint32]float64) *LabelScore {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	s, err := ScoreLabels(inf, v, labels, others)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSignAndLossAttacksOnKnownTranscripts(t *testing.T) {
	syn := newSynthetic(500, 1)
	for _, f := range []string{"h,h_bar", "delta"} {
		v := syn.view(400, 8, f, 0, false)
		inf, err := SignAttack(v)
		s := score(t, inf, err, v, syn.labels, nil)
		if s.Accuracy != 1 || s.AUC != 1 || s.Covered < 490 {
			t.Errorf("%s: sign attack %+v", f, s)
		}
	}
	v := syn.view(400, 8, "h,h_bar", 0, false)
	others := map[uint32]float64{}
	for i, o := range syn.others {
		others[uint32(i)] = o
	}
	inf, err := LossAttack(v)
	s := score(t, inf, err, v, syn.labels, others)
	if s.Accuracy != 1 || s.OthersR2 == nil || *s.OthersR2 < 0.999999 {
		t.Errorf("loss attack %+v (others R2 %v)", s, s.OthersR2)
	}
	// The loss attack refuses replies without losses.
	if _, err := LossAttack(syn.view(10, 8, "delta", 0, false)); err == nil {
		t.Error("loss attack on delta replies")
	}
	if _, err := SignAttack(syn.view(10, 8, "mean", 0, false)); err == nil {
		t.Error("sign attack on mean replies")
	}
}

// Batch means: with more equations than unknowns the regression recovers
// the labels; the active attacker's single perturbations make it exact
// even with batches of 64; heavy noise brings it to chance.
func TestRegressionAttack(t *testing.T) {
	syn := newSynthetic(300, 2)
	cases := []struct {
		name          string
		reqs, b       int
		noise         float64
		single        bool
		minAUC, maxAU float64
	}{
		{"passive, overdetermined", 3000, 8, 0, false, 0.97, 1},
		{"active, single perturbation", 3000, 64, 0, true, 0.999, 1},
		{"active under heavy noise", 3000, 64, 1, true, 0.35, 0.65},
	}
	for _, c := range cases {
		v := syn.view(c.reqs, c.b, "mean", c.noise, c.single)
		inf, err := RegressionAttack(v, 300)
		s := score(t, inf, err, v, syn.labels, nil)
		if s.AUC < c.minAUC || s.AUC > c.maxAU {
			t.Errorf("%s: AUC %.4f accuracy %.4f covered %d, want AUC in [%g, %g]", c.name, s.AUC, s.Accuracy, s.Covered, c.minAUC, c.maxAU)
		}
	}
}

// Multiclass: the derivative of each sample's loss sits near its class's
// value; a few known labels place the classes.
func TestDerivativeAttack(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	n, classes := 600, 4
	labels := make([]int32, n)
	v := &View{Run: "syn", Parties: []int{1}, K: 1, Format: "delta"}
	for i := range labels {
		labels[i] = int32(rng.IntN(classes))
	}
	for r := range 2000 {
		i := rng.IntN(n)
		dc := 1e-3 * rng.NormFloat64()
		g := float64(labels[i]) - 1.5 + 0.1*rng.NormFloat64() // class-specific derivative
		v.Requests = append(v.Requests, Request{Party: 1, Seq: uint64(r + 1), Replied: true,
			IDs: []uint32{uint32(i)}, C: []float64{0}, CHat: []float64{dc}, Delta: []float64{g * dc}})
	}
	inf, err := DerivativeAttack(v, classes, KnownLabels(labels, 40, 1))
	s := score(t, inf, err, v, labels, nil)
	if s.Accuracy < 0.97 || s.AUC < 0.97 {
		t.Errorf("derivative attack %+v", s)
	}
	if _, err := DerivativeAttack(v, classes, nil); err == nil {
		t.Error("no known labels: want an error")
	}
	// The reference: with the replies shuffled among the requests the
	// labels are gone (the party's own perturbations carry none here),
	// and the view itself is left as it was.
	before := v.Requests[0].Delta[0]
	w := ShuffleReplies(v, 1)
	inf, err = DerivativeAttack(w, classes, KnownLabels(labels, 40, 1))
	if s := score(t, inf, err, w, labels, nil); s.AUC > 0.56 || s.AUC < 0.44 {
		t.Errorf("shuffled replies: derivative attack %+v", s)
	}
	if v.Requests[0].Delta[0] != before || &w.Requests[0] == &v.Requests[0] {
		t.Error("ShuffleReplies changed its view")
	}
}

// Feature inference: a linear model's outputs over enough rounds are a
// linear image of the features, which auxiliary samples invert.
func TestFeatureAttack(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	n, d, rounds := 400, 5, 8
	x := &dataset.Matrix{NRows: n, NCols: d, Indptr: []int64{0}}
	dense := make([]float64, n*d)
	for i := range n {
		for j := range d {
			if rng.Float64() < 0.6 {
				v := float32(rng.NormFloat64())
				x.Indices, x.Values = append(x.Indices, int32(j)), append(x.Values, v)
				dense[i*d+j] = float64(v)
			}
		}
		x.Indptr = append(x.Indptr, int64(len(x.Indices)))
	}
	v := &View{Run: "syn", Parties: []int{2}, K: 1, Evals: map[int][]EvalRound{}}
	for r := range rounds {
		w := make([]float64, d)
		for j := range w {
			w[j] = rng.NormFloat64()
		}
		c := make([]float64, n)
		for i := range n {
			for j := range d {
				c[i] += w[j] * dense[i*d+j]
			}
		}
		split := schemas.SplitTrain
		if r == 0 {
			split = schemas.SplitInit
		}
		v.Evals[2] = append(v.Evals[2], EvalRound{Round: uint32(r), Split: split, C: c})
	}
	tr, err := PartyTrajectories(v, 2)
	if err != nil {
		t.Fatal(err)
	}
	s, err := FeatureAttack(tr, x, AuxSamples(n, 30, 1))
	if err != nil {
		t.Fatal(err)
	}
	if s.R2 < 0.9999 || s.Samples != n-30 {
		t.Errorf("feature attack with %d rounds for %d features: R2 %g on %d samples", rounds, d, s.R2, s.Samples)
	}
	// With fewer rounds than features the map is not invertible.
	v.Evals[2] = v.Evals[2][:3]
	tr, _ = PartyTrajectories(v, 2)
	s, _ = FeatureAttack(tr, x, AuxSamples(n, 30, 1))
	if s.R2 > 0.9 || s.Note == "" {
		t.Errorf("3 rounds for 5 features: R2 %g, note %q", s.R2, s.Note)
	}
}

func TestScoreLabels(t *testing.T) {
	inf := &LabelInference{Attack: "x", Classes: 2, IDs: []uint32{0, 1, 2, 3}, Score: []float64{0.9, 0.2, 0.4, 0.1}, Pred: []int32{1, 0, 0, 0}}
	s, err := ScoreLabels(inf, &View{Parties: []int{1}}, []int32{1, 0, 1, 0, 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Accuracy != 0.75 || s.AUC != 1 || s.Majority != 0.5 || s.Samples != 5 || s.Covered != 4 {
		t.Errorf("%+v", s)
	}
	if _, err := ScoreLabels(&LabelInference{Classes: 2, IDs: []uint32{9}, Score: []float64{1}, Pred: []int32{1}},
		&View{Parties: []int{1}}, []int32{1}, nil); err == nil {
		t.Error("an id beyond the truth: want an error")
	}
	if math.IsNaN(s.AUC) {
		t.Error("NaN")
	}
}

// A view read from a real log with hostile messages (a reply that does
// not fit its request, an undecodable payload, a request with ids out of
// range) keeps only what validates, and the attacks run on it.
func TestViewRejectsHostileMessages(t *testing.T) {
	ctx := context.Background()
	h := func(p int, seq uint64) schemas.Header {
		return schemas.Header{Version: schemas.Version, Party: uint16(p), Seq: seq}
	}
	l := publishLog(t, "h", []logMsg{
		{schemas.KindHello, &schemas.Hello{Header: h(1, 1), Model: "linear", InDim: 3, OutDim: 1, NTrain: 10}, nil},
		{schemas.KindOutput, &schemas.PartyOutput{Header: h(1, 2), IDs: []uint32{1, 2}, C: []float64{0, 0}, CHat: []float64{1, -1}}, nil},
		{schemas.KindReply, &schemas.Reply{Header: h(1, 1), ReqSeq: 2, Delta: []float64{0.1}}, nil},                              // one value for two samples
		{schemas.KindOutput, &schemas.PartyOutput{Header: h(1, 3), IDs: []uint32{99}, C: []float64{0}, CHat: []float64{1}}, nil}, // id out of range
		{schemas.KindReply, nil, []byte{0xc1}},
		{schemas.KindOutput, &schemas.PartyOutput{Header: h(1, 4), IDs: []uint32{3}, C: []float64{0}, CHat: []float64{1}}, nil},
		{schemas.KindReply, &schemas.Reply{Header: h(1, 2), ReqSeq: 4, Delta: []float64{-0.2}}, nil},
	})
	v, err := ReadView(ctx, l, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v.Invalid != 2 || v.Undecodable != 1 || len(v.Requests) != 2 || v.Requests[0].Replied || !v.Requests[1].Replied {
		t.Fatalf("view: invalid %d undecodable %d requests %+v", v.Invalid, v.Undecodable, v.Requests)
	}
	inf, err := SignAttack(v)
	if err != nil || len(inf.IDs) != 1 || inf.IDs[0] != 3 || inf.Pred[0] != 1 {
		t.Errorf("sign attack on the valid part: %+v %v", inf, err)
	}
}

// logMsg is a message of a hand-made log: m encoded, or raw bytes b.
type logMsg struct {
	k schemas.Kind
	m schemas.Message
	b []byte
}

// publishLog writes msgs, all on party 1's subjects, into run's stream on
// an embedded JetStream server and opens the log for reading.
func publishLog(t *testing.T, run string, msgs []logMsg) *replay.Log {
	t.Helper()
	ctx := context.Background()
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	bus, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{Server: srv, InProcess: true, Run: run})
	if err != nil {
		t.Fatal(err)
	}
	c := schemas.NewCodec()
	for _, x := range msgs {
		data := x.b
		if x.m != nil {
			b, err := c.Marshal(x.m)
			if err != nil {
				t.Fatal(err)
			}
			data = append([]byte(nil), b...)
		}
		if err := bus.Publish(ctx, &broker.Message{Subject: schemas.Subject(run, x.k, 1), Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	if err := bus.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := replay.Open(ctx, replay.Source{URL: srv.URL(), Run: run})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// The active attacker's request shaping: single perturbation, batches of
// one, pairs of batches that differ in one sample.
func TestActiveShapes(t *testing.T) {
	ids := []uint32{5, 6, 7, 8}
	c := []float64{1, 2, 3, 4}
	ch := []float64{1.1, 2.1, 3.1, 4.1}
	a := &Active{Perturb: 0.5}
	a.Request(0, ids, c, ch)
	n := 0
	for j := range c {
		if ch[j] != c[j] {
			n++
			if ch[j]-c[j] != 0.5 {
				t.Errorf("perturbation %g, want 0.5", ch[j]-c[j])
			}
		}
	}
	if n != 1 {
		t.Errorf("%d samples perturbed, want 1", n)
	}
	one := &Active{One: true}
	buf := make([]uint32, 4)
	if b := one.Batch(0, buf, 100); b != 1 {
		t.Errorf("batch of %d", b)
	}
	p := &Active{Pairs: true}
	a1, a2 := make([]uint32, 4), make([]uint32, 4)
	p.Batch(0, a1, 100)
	c1, h1 := []float64{0, 0, 0, 0}, []float64{0.1, 0.2, 0.3, 0.4}
	p.Request(0, a1, c1, h1)
	p.Batch(1, a2, 100)
	c2, h2 := []float64{1, 1, 1, 1}, []float64{9, 9, 9, 9}
	p.Request(1, a2, c2, h2)
	if !slices.Equal(a1[:3], a2[:3]) || a1[3] == a2[3] {
		t.Errorf("pair batches %v %v: want the same first three and different last", a1, a2)
	}
	for j := range 3 {
		if math.Abs((h2[j]-c2[j])-(h1[j]-c1[j])) > 1e-12 {
			t.Errorf("shared sample %d: perturbation %g then %g", j, h1[j]-c1[j], h2[j]-c2[j])
		}
	}
}

// The nudging attacker: its spec, its blocks (the same batch Rounds
// times, a quarter of it known samples), Hadamard signs whose columns are
// orthogonal over a block, and it keeps its model.
func TestNudgeAttacker(t *testing.T) {
	labels := make([]int32, 1000)
	adv, _, err := ParseAdversary("active,nudge,perturb=0.5,aux=40", labels, 1)
	if err != nil {
		t.Fatal(err)
	}
	a := adv.(*Active)
	if !a.Nudge || a.Perturb != 0.5 || len(a.Prefer) != 40 || !a.Frozen() {
		t.Fatalf("parsed %+v", a)
	}
	const b = 16
	ids := make([]uint32, b)
	var first []uint32
	sum := make([]float64, b*b) // column products over a block
	for r := range uint64(2 * b) {
		if n := a.Batch(r, ids, len(labels)); n != b {
			t.Fatalf("batch of %d", n)
		}
		switch {
		case r == 0:
			first = slices.Clone(ids)
			known := 0
			for _, id := range ids {
				if a.Prefer[id] {
					known++
				}
			}
			if known != b/4 {
				t.Errorf("%d known samples in a block of %d", known, b)
			}
		case r < b && !slices.Equal(ids, first):
			t.Fatalf("request %d: the block's batch changed", r)
		case r == b && slices.Equal(ids, first):
			t.Fatal("a new block repeats the batch")
		}
		c, chat := make([]float64, b), make([]float64, b)
		a.Request(r, ids, c, chat)
		if r < b {
			for i := range b {
				if math.Abs(chat[i]) != 0.5 {
					t.Fatalf("nudge %g", chat[i])
				}
				for j := range b {
					sum[i*b+j] += chat[i] * chat[j]
				}
			}
		}
	}
	for i := range b {
		for j := range b {
			want := 0.0
			if i == j {
				want = b * 0.25
			}
			if math.Abs(sum[i*b+j]-want) > 1e-12 {
				t.Fatalf("columns %d, %d: product %g over the block, want %g", i, j, sum[i*b+j], want)
			}
		}
	}
	for _, bad := range []string{"active,nudge,perturb=-1", "active,nudge,rounds=x", "active,nudge,aux=-3", "active,nudge,perturb=NaN"} {
		if _, _, err := ParseAdversary(bad, labels, 1); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// A label-free run's party sends its codes (evaluation passes) and no
// request: ReadView returns the view with ErrNoRequests (an ErrView), its
// evaluation outputs there for the feature inference.
func TestViewWithoutRequests(t *testing.T) {
	ctx := context.Background()
	h := func(seq uint64) schemas.Header { return schemas.Header{Version: schemas.Version, Party: 1, Seq: seq} }
	codes := []float64{0, 3, 1, 2}
	l := publishLog(t, "lf", []logMsg{
		{schemas.KindHello, &schemas.Hello{Header: h(1), Model: "linear", InDim: 3, OutDim: 1, NTrain: 4}, nil},
		{schemas.KindEval, &schemas.EvalOutput{Header: h(2), Round: 0, Split: schemas.SplitInit, Total: 4, C: codes}, nil},
	})
	v, err := ReadView(ctx, l, 1)
	if !errors.Is(err, ErrNoRequests) || !errors.Is(err, ErrView) || !strings.Contains(fmt.Sprint(err), "sent no requests") {
		t.Fatalf("a view without requests: %v, want ErrNoRequests", err)
	}
	if v == nil || len(v.Requests) != 0 {
		t.Fatalf("view %+v", v)
	}
	tr, err := PartyTrajectories(v, 1)
	if err != nil || tr.N != 4 || !slices.Equal(tr.X, codes) {
		t.Errorf("the codes from a view without requests: %+v, %v", tr, err)
	}
}
