package run

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/privacy/dp"
)

// DefenseConfig holds the label defenses of a run (the flags of train and
// aggregator); the zero value is the paper's protocol, undefended.
type DefenseConfig struct {
	Reply           string  `json:"reply,omitempty"`            // losses (default) | delta | mean
	MinBatch        int     `json:"min_batch,omitempty"`        // smallest batch the aggregator answers
	Clip            float64 `json:"clip,omitempty"`             // per-sample |h_bar - h| bound
	Noise           float64 `json:"noise,omitempty"`            // Gaussian noise std on every value sent
	NoiseMultiplier float64 `json:"noise_multiplier,omitempty"` // noise as a multiple of one visit's sensitivity
	HeadNoise       float64 `json:"head_noise,omitempty"`       // the head's step noise as a multiple of the replies' (heads with parameters; default 1)
	HeadClip        float64 `json:"head_clip,omitempty"`        // the head's step first-order, each sample's input clipped to this norm (softmax head)
	HeadMomentum    float64 `json:"head_momentum,omitempty"`    // momentum of the first-order head's noised steps (post-processing)
	HeadEMA         float64 `json:"head_ema,omitempty"`         // the head evaluated as a moving average of its iterates with this decay (post-processing)
	HeadRefresh     int     `json:"head_refresh,omitempty"`     // the head's label part released over all samples this many times an epoch of one party
	DPEpsilon       float64 `json:"dp_epsilon,omitempty"`       // per-label budget: visits beyond it are refused
	DPAUC           float64 `json:"dp_auc,omitempty"`           // the same budget given as the largest attack AUC it allows
	DPDelta         float64 `json:"dp_delta,omitempty"`         // delta of the accounting (default 1e-5)
	DPScope         string  `json:"dp_scope,omitempty"`         // the budget's view: party (each party's own, default) or all (collusion)
	LabelEpsilon    float64 `json:"label_epsilon,omitempty"`    // randomised response on the labels
	DrawBatches     bool    `json:"aggregator_batches,omitempty"`
	MaxOutput       float64 `json:"max_output,omitempty"`
	MaxPerturb      float64 `json:"max_perturb,omitempty"`
	// Key is the aggregator's secret (hex, 32 bytes) for noise, randomised
	// response and batch draws; generated when empty and needed. It is
	// recorded in summary.json so that the aggregator's organisation can
	// re-execute the run: keep that file from the parties.
	Key string `json:"key,omitempty"`
}

// needsKey reports whether the defense draws random numbers.
func (d *DefenseConfig) needsKey() bool {
	return d.Noise > 0 || d.NoiseMultiplier > 0 || d.LabelEpsilon > 0 || d.DrawBatches
}

// aggregatorDefense turns the configuration into the aggregator's Defense
// for batches of batch samples and a head that is logistic or not (see
// aggregator.Defense.Sensitivity); it fills in the key if needed.
func (c *Config) aggregatorDefense(logistic bool) (aggregator.Defense, error) {
	d := &c.Defense
	var out aggregator.Defense
	mode := d.Reply
	if mode == "" {
		mode = "losses"
		if c.Delta {
			mode = "delta"
		}
	}
	var err error
	if out.Reply, err = aggregator.ParseReplyMode(mode); err != nil {
		return out, fmt.Errorf("%w: --reply: %w", ErrConfig, err)
	}
	if c.Delta && out.Reply != aggregator.ReplyDelta {
		return out, fmt.Errorf("%w: --delta and --reply %s disagree", ErrConfig, mode)
	}
	out.MinBatch, out.Clip, out.Noise = d.MinBatch, d.Clip, d.Noise
	out.LabelEpsilon, out.DrawBatches = d.LabelEpsilon, d.DrawBatches
	out.MaxOutput, out.MaxPerturb, out.Delta = d.MaxOutput, d.MaxPerturb, d.DPDelta
	if d.NoiseMultiplier > 0 {
		if d.Noise > 0 {
			return out, fmt.Errorf("%w: give --noise or --noise-multiplier, not both", ErrConfig)
		}
		// One visit's sensitivity: 2C per sample (or the perturbation
		// bound with a logistic head), over B for a batch mean of at
		// least B samples.
		sens := out.Sensitivity(logistic)
		if math.IsInf(sens, 1) {
			return out, fmt.Errorf("%w: --noise-multiplier needs --clip (or --max-perturb with a binary set's logistic head)", ErrConfig)
		}
		if out.Reply == aggregator.ReplyMean {
			sens /= float64(max(d.MinBatch, 1))
		}
		out.Noise = d.NoiseMultiplier * sens
	}
	switch d.DPScope {
	case "", "party":
	case "all":
		out.BudgetAll = true
	default:
		return out, fmt.Errorf("%w: --dp-scope %q: want party or all", ErrConfig, d.DPScope)
	}
	if d.HeadNoise > 0 {
		out.HeadNoise = d.HeadNoise * out.Noise
	}
	out.HeadClip = d.HeadClip
	out.HeadMomentum, out.HeadEMA, out.HeadRefresh = d.HeadMomentum, d.HeadEMA, d.HeadRefresh
	if d.DPAUC > 0 {
		if d.DPEpsilon > 0 || d.DPAUC <= 0.5 || d.DPAUC >= 1 {
			return out, fmt.Errorf("%w: --dp-auc in (0.5, 1), and not with --dp-epsilon", ErrConfig)
		}
		mu := dp.MuForAUC(d.DPAUC)
		out.Budget = mu * mu / 2
	}
	if d.DPEpsilon > 0 {
		delta := d.DPDelta
		if delta == 0 {
			delta = 1e-5
		}
		out.Budget = dp.RhoForEpsilon(d.DPEpsilon, delta)
	}
	if d.needsKey() {
		if d.Key == "" {
			var k [32]byte
			if _, err := rand.Read(k[:]); err != nil {
				return out, err
			}
			d.Key = hex.EncodeToString(k[:])
		}
		b, err := hex.DecodeString(d.Key)
		if err != nil || len(b) != 32 {
			return out, fmt.Errorf("%w: --defense-key must be 64 hex digits", ErrConfig)
		}
		copy(out.Key[:], b)
	}
	for _, v := range []float64{d.Clip, d.Noise, d.NoiseMultiplier, d.HeadNoise, d.HeadClip, d.HeadMomentum, d.HeadEMA, d.DPEpsilon, d.DPAUC, d.DPDelta, d.LabelEpsilon, d.MaxOutput, d.MaxPerturb} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return out, fmt.Errorf("%w: defense settings must be finite and non-negative", ErrConfig)
		}
	}
	return out, nil
}

// Settings is what the aggregator's organisation needs, besides its labels
// and the log, to re-execute a run: everything that shapes the
// aggregator's computation. summary.json records it.
type Settings struct {
	Data      string                   `json:"data,omitempty"`
	Test      string                   `json:"test,omitempty"`
	Preset    string                   `json:"preset,omitempty"`
	Synthetic *dataset.SyntheticConfig `json:"synthetic,omitempty"`
	Algo      string                   `json:"algo"`
	Parties   int                      `json:"parties"`
	K         int                      `json:"k"`
	NoBias    bool                     `json:"no_bias,omitempty"`
	Mu        float64                  `json:"mu"`
	HeadLR    float64                  `json:"head_lr"`
	LRDecay   float64                  `json:"lr_decay,omitempty"`
	Batch     int                      `json:"batch"`
	MaxBatch  int                      `json:"max_batch,omitempty"`
	Seed      uint64                   `json:"seed"`
	Defense   DefenseConfig            `json:"defense"`
	// HoldOut is the share of the training rows the run kept aside as its
	// test set (Config.HoldOut), 0 if none.
	HoldOut float64 `json:"hold_out,omitempty"`
}

// Settings returns the re-execution settings of c.
func (c *Config) Settings() Settings {
	return Settings{Data: c.Data, Test: c.Test, Preset: c.Preset, Synthetic: c.Synthetic, Algo: c.Algo, Parties: c.Parties,
		K: c.K, NoBias: c.NoBias, Mu: c.Mu, HeadLR: c.HeadLR, LRDecay: c.LRDecay, Batch: c.Batch, MaxBatch: c.MaxBatch,
		Seed: c.Seed, Defense: c.Defense}
}

// Apply sets the fields of c that s records.
func (s *Settings) Apply(c *Config) {
	c.Data, c.Test, c.Preset, c.Synthetic = s.Data, s.Test, s.Preset, s.Synthetic
	c.Algo, c.Parties, c.K, c.NoBias, c.Mu, c.HeadLR, c.LRDecay = s.Algo, s.Parties, s.K, s.NoBias, s.Mu, s.HeadLR, s.LRDecay
	c.Batch, c.MaxBatch, c.Seed, c.Defense = s.Batch, s.MaxBatch, s.Seed, s.Defense
	c.HoldOut = s.HoldOut
	if c.HoldOut == 0 {
		c.HoldOut = -1 // the run had none: re-execution must not add one
	}
}
