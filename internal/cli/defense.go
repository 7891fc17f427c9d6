package cli

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/privacy"
	"github.com/asyrevel/asyrevel/run"
)

// addAdversaryFlag registers --adversary M:SPEC (repeatable): attack
// experiments make party M an attacker.
func addAdversaryFlag(fs *flag.FlagSet, h *run.Hooks) {
	var specs []string
	fs.Func("adversary", "make party M an attacker (attack experiments; repeatable): M:active (perturbs one\n"+
		"sample per request), M:active,one (batches of one), M:active,pairs (pairs of batches\n"+
		"that differ in one sample), M:active,nudge[,perturb=P,aux=N] (multiclass: nudges every\n"+
		"sample of a batch by +-P, Hadamard signs, the same batch as many times as it holds\n"+
		"samples; probes the N labels it knows), M:inflate=F (multiplies its outputs\n"+
		"by F), M:backdoor,target=1,features=0:1,value=1,poison=300,amplify=5 (a backdoor on\n"+
		"its feature columns 0 and 1, planted on 300 samples of class 1 it knows; train only)",
		func(v string) error {
			ms, spec, ok := strings.Cut(v, ":")
			m, err := strconv.Atoi(ms)
			if !ok || err != nil || m < 1 {
				return fmt.Errorf("want M:SPEC, e.g. 2:active")
			}
			if _, _, err := privacy.ParseAdversary(spec, nil, 0); err != nil && !strings.HasPrefix(spec, "backdoor") {
				return err
			}
			specs = append(specs, v)
			h.Attackers = func(cfg *run.Config, d *run.Data, h *run.Hooks) error { return setAdversaries(cfg, d, h, specs) }
			return nil
		})
}

// setAdversaries turns the --adversary specs into the run's adversaries.
func setAdversaries(cfg *run.Config, d *run.Data, h *run.Hooks, specs []string) error {
	h.Adversaries = map[int]party.Adversary{}
	h.PartyData = map[int]func(train, test *dataset.Matrix) (*dataset.Matrix, *dataset.Matrix){}
	for _, v := range specs {
		ms, spec, _ := strings.Cut(v, ":")
		m, _ := strconv.Atoi(ms)
		if m > cfg.Parties {
			return fmt.Errorf("%w: --adversary %s: the run has %d parties", errUsage, v, cfg.Parties)
		}
		if strings.HasPrefix(spec, "backdoor") && d.TrainY == nil {
			return fmt.Errorf("%w: --adversary %s: a backdoor picks the samples it poisons among those it knows to be of the target class: run it in train (one process)", errUsage, v)
		}
		a, b, err := privacy.ParseAdversary(spec, d.TrainY, cfg.Seed)
		if err != nil {
			return fmt.Errorf("%w: --adversary: %w", errUsage, err)
		}
		h.Adversaries[m] = a
		if b != nil {
			h.PartyData[m] = b.Data
		}
		h.Log.Warn().Int("party", m).Str("adversary", spec).Msg("party is an attacker")
	}
	return nil
}

// addDefenseFlags registers the label defenses of train and aggregator.
func addDefenseFlags(fs *flag.FlagSet, d *run.DefenseConfig, noLeak *bool) {
	fs.StringVar(&d.Reply, "reply", "", "what replies carry: losses (h and h_bar, the paper's; --privacy off), delta (h_bar - h\nper sample; same as --delta) or mean (the batch mean of h_bar - h, all a party's\nupdate needs)")
	fs.IntVar(&d.MinBatch, "min-batch", 0, "the aggregator rejects requests with fewer samples (with --reply mean: the\nbatch mean hides each sample among at least this many)")
	fs.Float64Var(&d.Clip, "clip", 0, "clip each per-sample h_bar - h to [-C, C] (needs --reply delta or mean)")
	fs.Float64Var(&d.Noise, "noise", 0, "standard deviation of Gaussian noise on every value a reply carries (needs --clip);\neach label's privacy loss is accounted over all its visits (summary.json)")
	fs.Float64Var(&d.NoiseMultiplier, "noise-multiplier", 0, "noise as a multiple of one visit's sensitivity: 2C per sample, 2C/min-batch for a\nbatch mean (instead of --noise)")
	fs.Float64Var(&d.HeadNoise, "head-noise", 0, "heads with parameters (multiclass, --bias): the noise of the head's own step as a\nmultiple of the replies' (default 1); every party's step moves the head, so it\nspends each label's budget q times faster: a larger value with a smaller --head-lr")
	fs.Float64Var(&d.HeadClip, "head-clip", 0, "softmax heads: the head's own step is first-order (its exact gradient), each\nsample's input [c; 1] clipped to this norm, noised (--head-noise) and accounted")
	fs.Float64Var(&d.HeadMomentum, "head-momentum", 0, "with --head-clip: momentum in [0, 1) of the head's noised steps (post-processing:\nthe bound is unchanged)")
	fs.Float64Var(&d.HeadEMA, "head-ema", 0, "with --head-clip: evaluate (and keep) the head as a moving average of its iterates\nwith this decay in [0, 1) (post-processing: the bound is unchanged)")
	fs.IntVar(&d.HeadRefresh, "head-refresh", 0, "with --head-clip: the head's step takes its label-free part exactly over the batch and\nits label part from a noised sum over all samples released R times an epoch of one\nparty (each label charged as one batch step's; R = parties charges what the per-batch\nhead does)")
	fs.Float64Var(&d.DPEpsilon, "dp-epsilon", 0, "per-label privacy budget: once a label's epsilon would exceed it, its sample\ncontributes 0 to the replies (a privacy filter; needs --noise)")
	fs.Float64Var(&d.DPAUC, "dp-auc", 0, "the same budget as the largest label-inference AUC it lets any attacker reach\n(Gaussian trade-off), e.g. 0.6 (instead of --dp-epsilon)")
	fs.Float64Var(&d.DPDelta, "dp-delta", 0, "delta of the (epsilon, delta) accounting (default 1e-5)")
	fs.StringVar(&d.DPScope, "dp-scope", "party", "whose view --dp-epsilon bounds: party (each party's own visits) or all (the union\nof every party's visits: all the parties colluding)")
	fs.Float64Var(&d.LabelEpsilon, "label-epsilon", 0, "randomised response on the training labels at the aggregator with this epsilon\n(label DP for everything the run reveals)")
	fs.BoolVar(&d.DrawBatches, "aggregator-batches", false, "the aggregator draws every party's batches: a party cannot choose which samples\nit asks about (against the active attacker)")
	fs.Float64Var(&d.MaxOutput, "max-output", 0, "clip every c and c_hat a party sends to [-M, M] (against inflated outputs)")
	fs.Float64Var(&d.MaxPerturb, "max-perturb", 0, "clip every c_hat - c a party sends to [-P, P]")
	fs.StringVar(&d.Key, "defense-key", "", "the aggregator's secret for noise, randomised response and batch draws (64 hex\ndigits; default random, recorded in summary.json for re-execution: keep it private)")
	fs.BoolVar(noLeak, "no-privacy-report", false, "do not score what each party's view reveals (privacy.json)")
}
