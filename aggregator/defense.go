package aggregator

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/privacy/dp"
	"github.com/asyrevel/asyrevel/schemas"
)

// ReplyMode is what a reply carries.
type ReplyMode uint8

// Reply modes.
const (
	// ReplyLosses sends h and h_bar per sample: the paper's wire format.
	// h is the loss itself: inverting a logistic loss gives the margin.
	ReplyLosses ReplyMode = iota
	// ReplyDelta sends h_bar - h per sample.
	ReplyDelta
	// ReplyMean sends one value, the batch mean of h_bar - h: all that
	// the party's update needs.
	ReplyMean
)

// String names the mode as the command line does.
func (m ReplyMode) String() string {
	switch m {
	case ReplyLosses:
		return "losses"
	case ReplyDelta:
		return "delta"
	case ReplyMean:
		return "mean"
	}
	return fmt.Sprintf("reply(%d)", m)
}

// ParseReplyMode reads "losses", "delta" or "mean".
func ParseReplyMode(s string) (ReplyMode, error) {
	for m := ReplyLosses; m <= ReplyMean; m++ {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: reply mode %q: want losses, delta or mean", ErrConfig, s)
}

// Defense is how the aggregator protects its labels from what the parties
// see and bounds what the parties send. The zero value is the paper's
// protocol, undefended.
type Defense struct {
	Reply ReplyMode
	// MinBatch rejects requests with fewer samples (0: any size).
	MinBatch int
	// Clip bounds every per-sample h_bar - h to [-Clip, Clip] before it
	// is sent or averaged (0: no clipping). Required by Noise.
	Clip float64
	// Noise is the standard deviation of the Gaussian noise added to
	// every value a reply carries (0: none). Each label's privacy loss is
	// accounted over all its visits (see package dp). With a head that has
	// parameters, the head's own step is clipped and noised the same way
	// and accounted too: it also reads the labels.
	Noise float64
	// HeadNoise is the noise of the head's own step, when the head has
	// parameters (0: Noise). Every party's step moves the head, so its
	// privacy cost per label grows q times faster than a reply's: a larger
	// HeadNoise (with a smaller head step size) keeps it in check.
	HeadNoise float64
	// HeadClip, if positive, makes the head's own step first-order: the
	// head is the aggregator's own (a softmax head, white-box), so its
	// step can be its exact gradient instead of a zeroth-order estimate
	// along one direction. Each sample's gradient is taken with its input
	// [c; 1] scaled to norm at most HeadClip, so that its label moves it
	// by at most sqrt(2) HeadClip ((e_y - e_y') times the input); the
	// batch mean gets Gaussian noise HeadNoise on every parameter and is
	// accounted and filtered by the budget like a reply. Needs Noise.
	HeadClip float64
	// HeadMomentum, in [0, 1), smooths the first-order head's noisy steps
	// (HeadClip): the step is lr times v = HeadMomentum v + (1 -
	// HeadMomentum) g, g the noised batch mean. It is post-processing of
	// the released noisy gradients, so the accounting is unchanged.
	HeadMomentum float64
	// HeadRefresh, if positive (with HeadClip), splits the first-order
	// head's gradient (p - e_y) [c; 1] into its label-free part p [c; 1],
	// taken exactly over each step's batch, and its label part e_y [c; 1],
	// released HeadRefresh times an epoch of one party as a noised sum
	// over every training sample (each input clipped to HeadClip, noise
	// HeadNoise MinBatch on the sum: each label costs what one batch's
	// head step costs) and divided by n. Every step between two releases
	// reuses the last one (post-processing), so the label part's noise is
	// MinBatch/n of the per-batch step's instead of averaging over
	// steps. Needs MinBatch.
	HeadRefresh int
	// HeadEMA, in [0, 1), evaluates the head (and returns it as the
	// result's parameters) as an exponential moving average of its
	// iterates with this decay (warmed up as min(HeadEMA, (1+t)/(10+t))
	// over its t steps), averaging the head's step noise out of the
	// model that is used. Post-processing: no label is read again.
	HeadEMA float64
	// Budget caps each label's zCDP rho: a sample whose next visit would
	// exceed it contributes 0 instead (a privacy filter; 0: no cap).
	Budget float64
	// BudgetAll applies Budget to the union of every party's view (all
	// the parties colluding) instead of each party's own view.
	BudgetAll bool
	// Delta is the delta of the (epsilon, delta) reported (default 1e-5).
	Delta float64
	// LabelEpsilon, if positive, trains on labels passed once through
	// randomised response with this epsilon (label DP for everything the
	// run reveals).
	LabelEpsilon float64
	// DrawBatches makes the aggregator draw each party's batches
	// (Control.BatchSeed): a party can no longer choose which samples it
	// asks about.
	DrawBatches bool
	// MaxOutput clips every c and c_hat a party sends to [-MaxOutput,
	// MaxOutput], and MaxPerturb every c_hat - c to [-MaxPerturb,
	// MaxPerturb] (0: no bound): against a party that inflates its
	// outputs to dominate the head.
	//
	// With the logistic head MaxPerturb also bounds what a label can
	// change: l(t) - l(-t) = -t, so flipping y_i changes h_bar_i - h_i by
	// exactly c_hat_i - c_i. The sensitivity of a reply value is then
	// min(2 Clip, MaxPerturb) (Sensitivity), and noise needs no Clip.
	MaxOutput, MaxPerturb float64
	// Key is the aggregator's secret for the noise, the randomised
	// response and the batch seed. Parties must never learn it; re-
	// execution needs it.
	Key [32]byte
}

func (d *Defense) check() error {
	switch {
	case d.Reply > ReplyMean:
		return fmt.Errorf("%w: reply mode %d", ErrConfig, d.Reply)
	case d.MinBatch < 0 || d.Clip < 0 || d.Noise < 0 || d.Budget < 0 || d.LabelEpsilon < 0 || d.MaxOutput < 0 || d.MaxPerturb < 0:
		return fmt.Errorf("%w: negative defense setting", ErrConfig)
	case d.Reply == ReplyLosses && (d.Clip > 0 || d.Noise > 0):
		return fmt.Errorf("%w: clipping and noise need replies of deltas or means, not losses", ErrConfig)
	case d.HeadNoise < 0 || d.HeadNoise > 0 && d.Noise == 0:
		return fmt.Errorf("%w: head noise needs noise", ErrConfig)
	case d.HeadClip < 0 || math.IsNaN(d.HeadClip) || math.IsInf(d.HeadClip, 0) || d.HeadClip > 0 && d.Noise == 0:
		return fmt.Errorf("%w: a head clip is finite, not negative, and needs noise", ErrConfig)
	case !(d.HeadMomentum >= 0 && d.HeadMomentum < 1) || !(d.HeadEMA >= 0 && d.HeadEMA < 1):
		return fmt.Errorf("%w: head momentum %g and head EMA %g must be in [0, 1)", ErrConfig, d.HeadMomentum, d.HeadEMA)
	case d.HeadRefresh < 0 || d.HeadRefresh > 0 && (d.HeadClip == 0 || d.MinBatch == 0):
		return fmt.Errorf("%w: a head refresh needs the first-order head (head clip) and a minimum batch", ErrConfig)
	case d.HeadMomentum > 0 && d.HeadClip == 0:
		return fmt.Errorf("%w: head momentum is for the first-order head step (head clip)", ErrConfig)
	case d.Noise > 0 && d.Clip == 0 && d.MaxPerturb == 0:
		return fmt.Errorf("%w: noise needs clipping (the sensitivity is 2 x clip, or with a logistic head the perturbation bound)", ErrConfig)
	case d.Budget > 0 && d.Noise == 0:
		return fmt.Errorf("%w: a privacy budget needs noise", ErrConfig)
	case d.Delta < 0 || d.Delta >= 1:
		return fmt.Errorf("%w: delta %g not in [0, 1)", ErrConfig, d.Delta)
	}
	return nil
}

// Sensitivity is the largest change of one reply value h_bar_i - h_i
// when sample i's label changes, for a head of classes classes with
// logistic (the parameter-free or intercept logistic head): 2 Clip, or
// MaxPerturb with a logistic head if smaller; +Inf without a bound.
func (d *Defense) Sensitivity(logistic bool) float64 {
	s := math.Inf(1)
	if d.Clip > 0 {
		s = 2 * d.Clip
	}
	if logistic && d.MaxPerturb > 0 {
		s = min(s, d.MaxPerturb)
	}
	return s
}

// IsLogistic reports whether h is the logistic head, whose reply values
// change by exactly c_hat - c when a label flips (Defense.MaxPerturb).
func IsLogistic(h model.Head) bool {
	_, ok := h.(*model.Logistic)
	return ok
}

// DefenseReport is the defense in force and what it did, with the label
// privacy accounting.
type DefenseReport struct {
	Reply         string  `json:"reply"`
	MinBatch      int     `json:"min_batch,omitempty"`
	Clip          float64 `json:"clip,omitempty"`
	Sensitivity   float64 `json:"sensitivity,omitempty"` // of one reply value to its label (with noise)
	Noise         float64 `json:"noise,omitempty"`
	Budget        float64 `json:"rho_budget,omitempty"`
	BudgetScope   string  `json:"budget_scope,omitempty"` // "party" or "all"
	LabelEpsilon  float64 `json:"label_epsilon,omitempty"`
	DrawBatches   bool    `json:"aggregator_draws_batches,omitempty"`
	MaxOutput     float64 `json:"max_output,omitempty"`
	MaxPerturb    float64 `json:"max_perturb,omitempty"`
	HeadNoised    bool    `json:"head_step_noised,omitempty"`
	HeadNoise     float64 `json:"head_noise,omitempty"`
	HeadClip      float64 `json:"head_clip,omitempty"`      // the head's step is first-order, inputs clipped to this norm
	HeadMomentum  float64 `json:"head_momentum,omitempty"`  // momentum of the head's noised steps (post-processing)
	HeadEMA       float64 `json:"head_ema,omitempty"`       // the head evaluated as a moving average of its iterates (post-processing)
	HeadRefresh   int     `json:"head_refresh,omitempty"`   // the head's label part released this many times an epoch of one party
	HeadRefreshes int     `json:"head_refreshes,omitempty"` // releases of it so far

	// Counters.
	ClippedOutputs int64       `json:"clipped_outputs,omitempty"` // c or c_hat values clipped to MaxOutput
	ClippedPerturb int64       `json:"clipped_perturbations,omitempty"`
	ClippedDeltas  int64       `json:"clipped_deltas,omitempty"`  // h_bar - h values clipped to Clip
	Masked         int64       `json:"masked_visits,omitempty"`   // sample visits refused by the budget
	SmallBatches   int64       `json:"small_batches,omitempty"`   // requests rejected under MinBatch
	UndrawnBatches int64       `json:"undrawn_batches,omitempty"` // requests whose ids were not the drawn ones
	FlippedLabels  int         `json:"flipped_labels,omitempty"`  // by randomised response
	Accounting     *Accounting `json:"accounting,omitempty"`      // with Noise
}

// Accounting is the per-label privacy loss of the noised replies: zCDP rho
// composed over the visits of each label, and the (epsilon, delta) of the
// exact Gaussian conversion; first what one party's own view reveals (the
// worst party and label), then the union of every party's view (all of
// them colluding).
type Accounting struct {
	Delta     float64 `json:"delta"`
	Labels    int     `json:"labels"`     // training labels
	Visited   int     `json:"visited"`    // labels with at least one visit
	MaxVisits int64   `json:"max_visits"` // most visits of one label, all parties
	// One party's view.
	MaxRho    float64 `json:"max_rho"`    // the worst (party, label)
	MedianRho float64 `json:"median_rho"` // median over visited labels of the worst party's rho
	Epsilon   float64 `json:"epsilon"`    // the worst (party, label)'s epsilon at Delta
	MedianEps float64 `json:"median_epsilon"`
	// AUCBound is the largest label-inference AUC that any single party,
	// passive or active, can reach against the worst label (Gaussian
	// trade-off; with randomised response, the smaller of the two).
	AUCBound float64 `json:"auc_bound"`
	// The union of all views (every party colluding).
	MaxRhoAll    float64 `json:"max_rho_all"`
	EpsilonAll   float64 `json:"epsilon_all"`
	MedianEpsAll float64 `json:"median_epsilon_all"`
	AUCBoundAll  float64 `json:"auc_bound_all"`
	// EpsilonZCDP is the classic zCDP conversion of MaxRho, for comparison.
	EpsilonZCDP float64 `json:"epsilon_zcdp"`
}

// defense is the aggregator's defense component: the runtime state of its
// Defense (the noise, each label's privacy accounting, the first-order
// head step's state) and the leakage scores. The aggregator holds one and
// calls it at the kernel's seams:
//
//   - init, once, gives the labels the head trains on (randomised
//     response);
//   - when a request arrives: admit (the batch rules) and boundOutputs;
//     when evaluation outputs arrive: boundEval;
//   - while a reply is made: emit per sample, then replied (the reply is
//     complete: its mean and noise, the visits, the leakage scores);
//   - the head's own step: Term (a kernel.Tap), endBatch and headNoise for
//     the zeroth-order step, stepHeadGrad for the first-order one, and
//     evalHead for the parameters evaluated;
//   - budgetSpent after each step; report, leakReport, state and restore
//     for the result and the checkpoints.
type defense struct {
	cfg   Defense
	noise *rand.Rand // ChaCha8 keyed by Key: reproducible by re-execution
	src   *rand.ChaCha8
	// Privacy loss in units of one unit-sensitivity visit, (sensitivity /
	// 2 clip)^2: of the replies to every party (unitAll), to each party
	// (unitP, q x n; maxP is its maximum over the parties) and of the
	// head's own steps (unitH, which every party sees the effects of).
	unitAll   []float64
	unitP     []float32
	maxP      []float32
	unitH     []float64
	n         int
	visits    []uint32 // per sample visits (with Noise)
	occ       []uint16 // per sample occurrences in the current batch (scratch)
	maxUnit   float64  // Budget in units (0: none)
	unitRho   float64  // rho of one unit: 2 clip^2 / noise^2
	headInc   float64  // a head step's units per unit of sensitivity: (noise / head noise)^2
	batchSeed uint64
	drawn     []uint32 // scratch for DrawBatch
	sum       float64  // running sum of the current mean reply
	rep       DefenseReport
	head      bool // the head's own step is noised
	live      bool // a sample of the current mechanism was not refused by the budget
	refuse    bool // the budget refuses the whole current request (too few samples left)
	masked    bool // the last sampleTerm was refused
	// grad and gradI are the first-order head step's batch and sample
	// gradients (HeadClip).
	grad, gradI []float64
	// mom is the head step's momentum (HeadMomentum); ema the moving
	// average of the head evaluated (HeadEMA), emaN its steps.
	mom, ema []float64
	emaN     int
	// lab is the released label part of the head's gradient (HeadRefresh),
	// divided by the samples it covers; every is its interval in head
	// steps, since the steps since it was released. spent: the last
	// release covered fewer than half the samples (the budget is spent),
	// and the head steps no more.
	lab          []float64
	every, since int
	spent        bool
	// dead counts the batch-mean replies in a row whose every sample the
	// budget refused (budgetSpent).
	dead int
	// leak scores what each party's view reveals (leakage.go).
	leak leakage
}

// deriveKey gives an independent key for purpose p from the secret.
func deriveKey(k [32]byte, p byte) [32]byte {
	k[31] ^= p
	var g = rand.NewChaCha8(k)
	var out [32]byte
	for i := 0; i < 32; i += 8 {
		binary.LittleEndian.PutUint64(out[i:], g.Uint64())
	}
	return out
}

// init sets the defense up for cfg (whose Defense.Reply it may set from
// ReplyDelta) with q parties and n training samples, and returns the
// labels the head trains on: cfg.Labels, or a copy passed through
// randomised response.
func (d *defense) init(cfg *Config, q, n int) ([]int32, error) {
	labels, err := d.setup(cfg, q, n)
	if err != nil {
		return nil, err
	}
	d.leak.init(cfg, q, n, d.cfg.Reply)
	return labels, nil
}

func (d *defense) setup(cfg *Config, q, n int) (labels []int32, err error) {
	if cfg.ReplyDelta && cfg.Defense.Reply == ReplyLosses {
		cfg.Defense.Reply = ReplyDelta
	}
	d.cfg = cfg.Defense
	if err := d.cfg.check(); err != nil {
		return nil, err
	}
	if d.cfg.Delta == 0 {
		d.cfg.Delta = 1e-5
	}
	c := &d.cfg
	d.rep = DefenseReport{Reply: c.Reply.String(), MinBatch: c.MinBatch, Clip: c.Clip, Noise: c.Noise, Budget: c.Budget,
		LabelEpsilon: c.LabelEpsilon, DrawBatches: c.DrawBatches, MaxOutput: c.MaxOutput, MaxPerturb: c.MaxPerturb}
	d.src = rand.NewChaCha8(deriveKey(c.Key, 1))
	d.noise = rand.New(d.src)
	labels = cfg.Labels
	if c.LabelEpsilon > 0 {
		labels = slices.Clone(cfg.Labels)
		classes := cfg.Head.Classes()
		keep := dp.KeepProb(c.LabelEpsilon, classes)
		rr := rand.New(rand.NewChaCha8(deriveKey(c.Key, 2)))
		for i, y := range labels {
			if rr.Float64() >= keep {
				o := int32(rr.IntN(classes - 1))
				if o >= y {
					o++
				}
				labels[i] = o
				d.rep.FlippedLabels++
			}
		}
	}
	if c.DrawBatches {
		g := rand.NewChaCha8(deriveKey(c.Key, 3))
		for d.batchSeed == 0 {
			d.batchSeed = g.Uint64()
		}
		d.drawn = make([]uint32, cfg.MaxBatch)
	}
	if c.Budget > 0 {
		d.rep.BudgetScope = "party"
		if c.BudgetAll {
			d.rep.BudgetScope = "all"
		}
	}
	if c.Noise > 0 {
		d.n = n
		d.unitAll = make([]float64, n)
		d.unitP = make([]float32, q*n)
		d.maxP = make([]float32, n)
		d.unitH = make([]float64, n)
		d.visits = make([]uint32, n)
		d.occ = make([]uint16, n)
		sens := c.Sensitivity(IsLogistic(cfg.Head))
		if math.IsInf(sens, 1) {
			return nil, fmt.Errorf("%w: noise needs clipping: --clip, or --max-perturb with a logistic head", ErrConfig)
		}
		d.rep.Sensitivity = sens
		d.unitRho = dp.GaussianRho(sens, c.Noise)
		if c.HeadNoise == 0 {
			c.HeadNoise = c.Noise
		}
		d.headInc = (c.Noise / c.HeadNoise) * (c.Noise / c.HeadNoise)
		if c.Budget > 0 {
			d.maxUnit = c.Budget / d.unitRho
		}
		d.head = cfg.Head.NumParams() > 0
		d.rep.HeadNoised = d.head
		if d.head {
			d.rep.HeadNoise = c.HeadNoise
		}
		if c.HeadClip > 0 {
			if _, ok := cfg.Head.(*model.Softmax); !ok {
				return nil, fmt.Errorf("%w: --head-clip (a first-order head step) is for the softmax head", ErrConfig)
			}
			// A label moves a sample's clipped gradient by sqrt(2)
			// HeadClip: in units of a reply's sensitivity, at the head's
			// noise.
			r := math.Sqrt2 * c.HeadClip / sens
			d.headInc *= r * r
			d.rep.HeadClip = c.HeadClip
			d.rep.HeadMomentum, d.rep.HeadEMA = c.HeadMomentum, c.HeadEMA
			d.grad = make([]float64, cfg.Head.NumParams())
			d.gradI = make([]float64, cfg.Head.NumParams())
			if c.HeadMomentum > 0 {
				d.mom = make([]float64, cfg.Head.NumParams())
			}
			if c.HeadRefresh > 0 {
				// HeadRefresh releases an epoch of one party: n/MinBatch
				// steps of each of the q parties.
				steps := float64(q) * float64(n) / float64(c.MinBatch)
				d.every = max(1, int(math.Round(steps/float64(c.HeadRefresh))))
				d.rep.HeadRefresh = c.HeadRefresh
			}
		}
	}
	return labels, nil
}

// admit enforces the batch rules on a valid request o of party m, its
// request number version, over n training samples.
func (d *defense) admit(m int, o *schemas.PartyOutput, version uint32, n int) error {
	if len(o.IDs) < d.cfg.MinBatch {
		d.rep.SmallBatches++
		return fmt.Errorf("%w: batch of %d samples, the aggregator requires at least %d", schemas.ErrShape, len(o.IDs), d.cfg.MinBatch)
	}
	d.refuse = d.cfg.Reply == ReplyMean && d.maxUnit > 0 && !d.enoughBudget(m, o.IDs)
	if d.cfg.DrawBatches {
		want := d.drawn[:len(o.IDs)]
		schemas.DrawBatch(want, d.batchSeed, m, uint64(version), n)
		if !slices.Equal(want, o.IDs) {
			d.rep.UndrawnBatches++
			return fmt.Errorf("%w: request %d of party %d does not hold the batch the aggregator drew", schemas.ErrState, version, m)
		}
	}
	return nil
}

// enoughBudget reports whether at least half the samples of a batch-mean
// request of party m have budget left for this visit. A mean over fewer
// live samples carries the full noise on a fraction of the signal: once
// most of the labels are spent, such replies would only push the party's
// model around, so the whole request is refused (an exact 0). Whether it
// is depends on the visits only, never on a label.
func (d *defense) enoughBudget(m int, ids []uint32) bool {
	b := len(ids)
	inc := 1 / float64(b*b)
	live := 0
	for _, id := range ids {
		i := int(id)
		cur := float64(d.unitP[(m-1)*d.n+i]) + d.unitH[i]
		if d.cfg.BudgetAll {
			cur = d.unitAll[i] + d.unitH[i]
		}
		if cur+inc <= d.maxUnit {
			live++
		}
	}
	return 2*live >= b
}

// boundOutputs clips c and c_hat - c of a request in place.
func (d *defense) boundOutputs(o *schemas.PartyOutput) {
	if mo := d.cfg.MaxOutput; mo > 0 {
		d.rep.ClippedOutputs += clipAll(o.C, mo) + clipAll(o.CHat, mo)
	}
	if mp := d.cfg.MaxPerturb; mp > 0 {
		for j, c := range o.C {
			if v := o.CHat[j] - c; v > mp || v < -mp {
				o.CHat[j] = c + math.Copysign(mp, v)
				d.rep.ClippedPerturb++
			}
		}
	}
}

// boundEval clips evaluation outputs to MaxOutput.
func (d *defense) boundEval(c []float64) {
	if mo := d.cfg.MaxOutput; mo > 0 {
		d.rep.ClippedOutputs += clipAll(c, mo)
	}
}

func clipAll(x []float64, b float64) int64 {
	var n int64
	for i, v := range x {
		if v > b {
			x[i], n = b, n+1
		} else if v < -b {
			x[i], n = -b, n+1
		}
	}
	return n
}

// Mechanisms over a batch whose privacy loss sampleTerm accounts.
const (
	termDelta = iota // per-sample reply values
	termMean         // the batch mean of a reply
	termHead         // the batch mean of the head's own step
)

// sampleTerm is the clipped, budget-filtered contribution of one visit of
// sample i (one occurrence in a batch of b) to a mechanism of kind term
// whose result goes to party m (every party, for the head's step). It
// accounts the visit.
func (d *defense) sampleTerm(m, i, b int, v float64, term int) float64 {
	if c := d.cfg.Clip; c > 0 && (v > c || v < -c) {
		v = math.Copysign(c, v)
		d.rep.ClippedDeltas++
	}
	d.masked = false
	if d.refuse && term == termMean {
		d.rep.Masked++
		d.masked = true
		return 0
	}
	if d.unitAll == nil {
		d.live = true
		return v
	}
	// The L2 sensitivity of the mechanism to y_i grows with the number of
	// occurrences o of i: 2C sqrt(o) per sample, 2C o/b for a mean. In
	// units of (2C)^2: o, or o^2/b^2; this occurrence adds the increment.
	d.occ[i]++
	o := float64(d.occ[i])
	inc := 1.0
	if term != termDelta {
		inc = (2*o - 1) / float64(b*b)
	}
	if term == termHead {
		inc *= d.headInc
	}
	p := (m-1)*d.n + i
	if d.maxUnit > 0 {
		var cur float64
		switch {
		case d.cfg.BudgetAll:
			cur = d.unitAll[i] + d.unitH[i]
		case term == termHead:
			cur = float64(d.maxP[i]) + d.unitH[i]
		default:
			cur = float64(d.unitP[p]) + d.unitH[i]
		}
		if cur+inc > d.maxUnit {
			d.occ[i]-- // not counted: it contributes nothing
			d.rep.Masked++
			d.masked = true
			return 0
		}
	}
	d.live = true
	if term == termHead {
		d.unitH[i] += inc
		return v
	}
	d.unitAll[i] += inc
	d.unitP[p] += float32(inc)
	d.maxP[i] = max(d.maxP[i], d.unitP[p])
	return v
}

// endBatch resets the occurrence counters after one mechanism over a
// batch; visit counts the batch's samples as visited (once per batch).
func (d *defense) endBatch(ids []uint32, visit bool) {
	if d.occ == nil {
		return
	}
	for _, id := range ids {
		if d.occ[id] > 0 {
			d.occ[id] = 0
			if visit {
				d.visits[id]++
			}
		}
	}
}

// emit adds sample i's part of the reply r to party m (its losses h and
// hb) in a batch of b.
func (d *defense) emit(r *schemas.Reply, m, i, b int, h, hb float64) {
	switch d.cfg.Reply {
	case ReplyLosses:
		r.H = append(r.H, h)
		r.HBar = append(r.HBar, hb)
	case ReplyDelta:
		v := d.sampleTerm(m, i, b, hb-h, termDelta)
		// A value the budget refused is an exact 0: whether a visit is
		// refused depends on the visits only, never on a label.
		if d.cfg.Noise > 0 && !d.masked {
			v += d.cfg.Noise * d.noise.NormFloat64()
		}
		r.Delta = append(r.Delta, v)
	case ReplyMean:
		d.sum += d.sampleTerm(m, i, b, hb-h, termMean)
	}
}

// replied completes the reply r to party m's request o (emit made its
// samples' part): the batch mean and its noise, the visits accounted, the
// leakage scored.
func (d *defense) replied(m int, o *schemas.PartyOutput, r *schemas.Reply) {
	d.finishReply(r, len(o.IDs))
	d.endBatch(o.IDs, true)
	d.leak.observe(m, o, r)
}

// finishReply completes the reply r to a batch of b samples.
func (d *defense) finishReply(r *schemas.Reply, b int) {
	r.Mean = d.cfg.Reply == ReplyMean
	if r.Mean {
		v := d.sum / float64(b)
		// A batch whose every sample the budget refused gets an exact 0
		// (no label is read, and noise alone would only push the party's
		// model around): once the budget is spent, training stops moving.
		if d.cfg.Noise > 0 && d.live {
			v += d.cfg.Noise * d.noise.NormFloat64()
		}
		r.Delta = append(r.Delta, v)
		d.sum = 0
		if d.maxUnit > 0 {
			if d.live {
				d.dead = 0
			} else {
				d.dead++
			}
		}
	}
	d.live, d.refuse = false, false
}

// ReasonBudget is the stop reason of a run whose per-label budget is
// spent (Result.StopReason): every request of the last while got an exact
// 0, so no party's model could move any more.
const ReasonBudget = "privacy budget spent"

// spentRequests is how many batch-mean requests in a row the budget must
// refuse, per party, before the run stops (budgetSpent): a few windows'
// worth, so that a party whose drawn batches happen to hold spent samples
// for a moment does not end the run.
const spentRequests = 16

// budgetSpent reports whether the per-label budget refused the last
// spentRequests*q batch-mean requests in a row: the replies are exact
// zeros and the head (its released label part spent, or its terms
// refused) no longer steps, so nothing can move the model. Whether it is
// depends on the visits only, never on a label.
func (d *defense) budgetSpent(q int) bool {
	return d.maxUnit > 0 && d.cfg.Reply == ReplyMean && d.dead >= spentRequests*q && (d.lab == nil || d.spent)
}

// Term is sample i's term of the head's own step (h_hat - h): clipped,
// filtered and accounted like a mean reply when the head is noised. It
// makes the defense the kernel's Tap (kernel.HeadDiff).
func (d *defense) Term(i, b int, v float64) float64 {
	if !d.head {
		return v
	}
	return d.sampleTerm(0, i, b, v, termHead)
}

// headIn is what the head's first-order step reads of the aggregator's
// state: the head, its parameters (stepped in place), the outputs table
// (n rows of width), the labels the head trains on and the step size.
type headIn struct {
	head     *model.Softmax
	w0       []float64
	table    []float64
	width, n int
	labels   []int32
	lr       float64
}

// stepHeadGrad is the head's first-order step under HeadClip: the batch
// mean of the samples' gradients, each with its input scaled to norm at
// most HeadClip, filtered and accounted by the budget, plus Gaussian
// noise HeadNoise on every parameter. It does not allocate.
func (d *defense) stepHeadGrad(a *headIn, ids []uint32) {
	if d.cfg.HeadRefresh > 0 {
		d.stepHeadRefreshed(a, ids)
		return
	}
	head := a.head
	g, gi := d.grad, d.gradI
	clear(g)
	b := len(ids)
	for _, id := range ids {
		i := int(id)
		d.sampleTerm(0, i, b, 0, termHead)
		if d.masked {
			continue
		}
		x := a.table[i*a.width : (i+1)*a.width]
		n2 := 1.0 // the bias's input
		for _, v := range x {
			n2 += v * v
		}
		s := min(1, d.cfg.HeadClip/math.Sqrt(n2))
		clear(gi)
		head.Grad(a.w0, x, a.labels[i], gi, nil)
		for k, v := range gi {
			g[k] += s * v
		}
	}
	d.endBatch(ids, false)
	live := d.live
	d.live = false
	if !live {
		return // every sample refused: no step (and no noise)
	}
	lr := a.lr
	inv := 1 / float64(b)
	if d.cfg.HeadEMA > 0 && d.ema == nil {
		d.ema = slices.Clone(a.w0) // the average starts at the initial head
	}
	if d.mom == nil {
		for k, v := range g {
			a.w0[k] -= lr * (v*inv + d.cfg.HeadNoise*d.noise.NormFloat64())
		}
	} else {
		b := d.cfg.HeadMomentum
		for k, v := range g {
			d.mom[k] = b*d.mom[k] + (1-b)*(v*inv+d.cfg.HeadNoise*d.noise.NormFloat64())
			a.w0[k] -= lr * d.mom[k]
		}
	}
	d.updateEMA(a.w0)
}

// stepHeadRefreshed is the head's step under HeadRefresh: the label-free
// part of the clipped gradient over the batch, exact, minus the label
// part released at the last refresh (one now if due). It does not
// allocate.
func (d *defense) stepHeadRefreshed(a *headIn, ids []uint32) {
	if d.spent {
		return
	}
	if d.lab == nil || d.since >= d.every {
		if d.refreshLabelTerm(a); d.spent {
			return
		}
	}
	d.since++
	head := a.head
	g, gi := d.grad, d.gradI
	clear(g)
	p := a.width
	bias := len(g) - head.Classes()
	for _, id := range ids {
		i := int(id)
		x := a.table[i*p : (i+1)*p]
		s := d.headScale(x)
		clear(gi)
		// (p - e_0) [x; 1] plus e_0 [x; 1]: p [x; 1], whatever the label.
		head.Grad(a.w0, x, 0, gi, nil)
		for j, v := range x {
			gi[j] += v
		}
		gi[bias]++
		for k, v := range gi {
			g[k] += s * v
		}
	}
	lr := a.lr
	inv := 1 / float64(len(ids))
	if d.cfg.HeadEMA > 0 && d.ema == nil {
		d.ema = slices.Clone(a.w0)
	}
	if d.mom == nil {
		for k, v := range g {
			a.w0[k] -= lr * (v*inv - d.lab[k])
		}
	} else {
		b := d.cfg.HeadMomentum
		for k, v := range g {
			d.mom[k] = b*d.mom[k] + (1-b)*(v*inv-d.lab[k])
			a.w0[k] -= lr * d.mom[k]
		}
	}
	d.updateEMA(a.w0)
}

// refreshLabelTerm releases the label part of the head's gradient: the
// sum over every training sample with budget left of e_y [c; 1], the
// input clipped to HeadClip, plus Gaussian noise HeadNoise MinBatch on
// every parameter, divided by the number of those samples. Each label is
// charged one head visit in a batch of MinBatch: the same sensitivity to
// noise ratio, sqrt(2) HeadClip / (HeadNoise MinBatch).
//
// Once fewer than half the samples have budget left, the head stops
// (spent), as a batch-mean request does: the label-free part of a step
// would otherwise go on alone and drive every class's probability down
// to the uniform (a 20 s MNIST run past its 8 epochs' budget ended at
// 6.26%, loss ln 10). Whether it stops depends on the visits only.
func (d *defense) refreshLabelTerm(a *headIn) {
	head := a.head
	if d.lab == nil {
		d.lab = make([]float64, len(a.w0))
	}
	clear(d.lab)
	p := a.width
	bias := len(d.lab) - head.Classes()
	bsz := d.cfg.MinBatch
	live := 0
	for i := range a.n {
		d.sampleTerm(0, i, bsz, 0, termHead)
		if d.masked {
			continue
		}
		live++
		x := a.table[i*p : (i+1)*p]
		s := d.headScale(x)
		y := int(a.labels[i])
		row := d.lab[y*p : (y+1)*p]
		for j, v := range x {
			row[j] += s * v
		}
		d.lab[bias+y] += s
	}
	if d.occ != nil {
		clear(d.occ)
	}
	d.live = false
	if 2*live < a.n {
		d.spent = true
		clear(d.lab)
		return
	}
	sd := d.cfg.HeadNoise * float64(bsz)
	inv := 1 / float64(live)
	for k, v := range d.lab {
		d.lab[k] = (v + sd*d.noise.NormFloat64()) * inv
	}
	d.since = 0
	d.rep.HeadRefreshes++
}

// headScale is the factor that clips a head input [x; 1] to HeadClip.
func (d *defense) headScale(x []float64) float64 {
	n2 := 1.0 // the bias's input
	for _, v := range x {
		n2 += v * v
	}
	return min(1, d.cfg.HeadClip/math.Sqrt(n2))
}

// updateEMA folds the head's new iterate w0 into its moving average
// (HeadEMA), warmed up over the first steps.
func (d *defense) updateEMA(w0 []float64) {
	if d.cfg.HeadEMA == 0 {
		return
	}
	d.emaN++
	b := min(d.cfg.HeadEMA, float64(1+d.emaN)/float64(10+d.emaN))
	for k, v := range w0 {
		d.ema[k] = b*d.ema[k] + (1-b)*v
	}
}

// evalHead is the head's parameters used to evaluate and returned: the
// moving average under HeadEMA, else the iterate w0.
func (d *defense) evalHead(w0 []float64) []float64 {
	if d.ema != nil {
		return d.ema
	}
	return w0
}

// headNoise is the noise of the head's step (0 unless noised).
func (d *defense) headNoise() float64 {
	if !d.head || !d.live {
		d.live = false
		return 0
	}
	d.live = false
	return d.cfg.HeadNoise * d.noise.NormFloat64()
}

// report is the defense's report with the accounting so far, for n labels.
func (d *defense) report(n int) DefenseReport {
	r := d.rep
	if d.unitAll == nil {
		if d.cfg.LabelEpsilon > 0 {
			e, b := d.cfg.LabelEpsilon, dp.AUCBoundPure(d.cfg.LabelEpsilon)
			r.Accounting = &Accounting{Labels: n, Epsilon: e, MedianEps: e, AUCBound: b, EpsilonAll: e, MedianEpsAll: e, AUCBoundAll: b}
		}
		return r
	}
	acc := &Accounting{Delta: d.cfg.Delta, Labels: n}
	var party, all []float64
	for i := range d.n {
		if d.visits[i] == 0 {
			continue
		}
		party = append(party, (float64(d.maxP[i])+d.unitH[i])*d.unitRho)
		all = append(all, (d.unitAll[i]+d.unitH[i])*d.unitRho)
		acc.MaxVisits = max(acc.MaxVisits, int64(d.visits[i]))
	}
	acc.Visited = len(party)
	med := func(x []float64) (float64, float64) {
		if len(x) == 0 {
			return 0, 0
		}
		slices.Sort(x)
		return x[len(x)-1], x[len(x)/2]
	}
	var medAll float64
	acc.MaxRho, acc.MedianRho = med(party)
	acc.MaxRhoAll, medAll = med(all)
	acc.Epsilon, acc.MedianEps = dp.Epsilon(acc.MaxRho, acc.Delta), dp.Epsilon(acc.MedianRho, acc.Delta)
	acc.EpsilonAll, acc.MedianEpsAll = dp.Epsilon(acc.MaxRhoAll, acc.Delta), dp.Epsilon(medAll, acc.Delta)
	acc.EpsilonZCDP = dp.EpsilonZCDP(acc.MaxRho, acc.Delta)
	acc.AUCBound = dp.AUCBoundGaussian(dp.Mu(acc.MaxRho))
	acc.AUCBoundAll = dp.AUCBoundGaussian(dp.Mu(acc.MaxRhoAll))
	if e := d.cfg.LabelEpsilon; e > 0 {
		b := dp.AUCBoundPure(e)
		acc.AUCBound, acc.AUCBoundAll = min(acc.AUCBound, b), min(acc.AUCBoundAll, b)
		acc.Epsilon, acc.EpsilonAll = min(acc.Epsilon, e), min(acc.EpsilonAll, e)
	}
	r.Accounting = acc
	return r
}

// DefenseState is the defense's state in a checkpoint: the noise
// generator and each label's privacy loss so far, with the counters, so
// that a resumed run goes on drawing the same noise and spending the same
// budgets (re-execution and the recorded replies agree across a resume).
type DefenseState struct {
	Noise   []byte // the ChaCha8 state
	UnitAll []float64
	UnitP   []float32
	MaxP    []float32
	UnitH   []float64
	Visits  []uint32
	Report  DefenseReport // the counters (Accounting is recomputed)
	// The head's step state: the released label part and the steps since
	// its release (HeadRefresh; Spent: the budget ran out), the momentum
	// and the moving average (HeadMomentum, HeadEMA). Without them a
	// resumed aggregator would release the label part again at once
	// (charged twice, safe) and draw noise the recorded run did not, so
	// that the replies computed again from the stream differ.
	Lab      []float64
	Since    int
	Spent    bool
	Mom, EMA []float64
	EMASteps int
}

// state copies the defense's state into s, reusing its buffers.
func (d *defense) state(s *DefenseState) *DefenseState {
	if s == nil {
		s = &DefenseState{}
	}
	s.Noise, _ = d.src.MarshalBinary()
	s.UnitAll = append(s.UnitAll[:0], d.unitAll...)
	s.UnitP = append(s.UnitP[:0], d.unitP...)
	s.MaxP = append(s.MaxP[:0], d.maxP...)
	s.UnitH = append(s.UnitH[:0], d.unitH...)
	s.Visits = append(s.Visits[:0], d.visits...)
	s.Report = d.rep
	s.Report.Accounting = nil
	s.Lab = append(s.Lab[:0], d.lab...)
	if d.lab == nil {
		s.Lab = nil
	}
	s.Since, s.Spent, s.EMASteps = d.since, d.spent, d.emaN
	s.Mom = append(s.Mom[:0], d.mom...)
	s.EMA = append(s.EMA[:0], d.ema...)
	if d.ema == nil {
		s.EMA = nil
	}
	return s
}

// restore sets the defense's state from a checkpoint's.
func (d *defense) restore(s *DefenseState) error {
	if s == nil {
		if d.unitAll != nil {
			return fmt.Errorf("%w: the checkpoint holds no defense state (its noise and accounting), and this run has one", ErrResume)
		}
		return nil
	}
	if len(s.UnitAll) != len(d.unitAll) || len(s.UnitP) != len(d.unitP) || len(s.MaxP) != len(d.maxP) ||
		len(s.UnitH) != len(d.unitH) || len(s.Visits) != len(d.visits) {
		return fmt.Errorf("%w: the checkpoint's defense state is not this run's defense (noise on one side only, or other dimensions)", ErrResume)
	}
	if err := d.src.UnmarshalBinary(s.Noise); err != nil {
		return fmt.Errorf("%w: the defense's noise state: %w", ErrResume, err)
	}
	copy(d.unitAll, s.UnitAll)
	copy(d.unitP, s.UnitP)
	copy(d.maxP, s.MaxP)
	copy(d.unitH, s.UnitH)
	copy(d.visits, s.Visits)
	r := s.Report
	r.Accounting = nil
	// The settings are this run's; the counters the checkpoint's.
	d.rep.ClippedOutputs, d.rep.ClippedPerturb, d.rep.ClippedDeltas = r.ClippedOutputs, r.ClippedPerturb, r.ClippedDeltas
	d.rep.Masked, d.rep.SmallBatches, d.rep.UndrawnBatches = r.Masked, r.SmallBatches, r.UndrawnBatches
	d.rep.HeadRefreshes = r.HeadRefreshes
	// The head's step state, when this run's head keeps it. A checkpoint
	// without the released label part makes the next step release it
	// again: each label is charged once more (never less).
	if d.grad != nil {
		if len(s.Lab) != 0 && len(s.Lab) != len(d.grad) || len(s.Mom) != 0 && len(s.Mom) != len(d.grad) || len(s.EMA) != 0 && len(s.EMA) != len(d.grad) {
			return fmt.Errorf("%w: the checkpoint's head step state has other dimensions than this run's head", ErrResume)
		}
		d.lab = nil
		if len(s.Lab) > 0 {
			d.lab = slices.Clone(s.Lab)
		}
		d.since, d.spent, d.emaN = s.Since, s.Spent, s.EMASteps
		if d.mom != nil && len(s.Mom) > 0 {
			copy(d.mom, s.Mom)
		}
		d.ema = nil
		if len(s.EMA) > 0 {
			d.ema = slices.Clone(s.EMA)
		}
	}
	return nil
}
