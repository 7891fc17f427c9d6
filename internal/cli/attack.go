package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/asyrevel/asyrevel/privacy"
	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/schemas"
)

const attackUsage = `Usage: asyrevel attack NAME (--store DIR | --nats URL) --run R --as M [--truth DATA] --out DIR

Attacks on a run's recorded traffic. Each reads only what its attacker legitimately
saw (party M's requests, the replies to them and the control messages; the
aggregator: every party's outputs); the ground truth (--truth: the run's data) is
read only by the scorer. Each writes attack.json (accuracy or R squared, ROC AUC,
samples covered) and attack.png into --out.

Label inference by a curious party (--as M, or colluding parties: --as 1,2,3):
  sign         -sign(h_bar - h) sign(c_hat - c) is the label, for any mu (per-sample replies)
  loss         inverting the logistic loss h gives the margin, the label and the sum of
               the other parties' outputs (the paper's replies, with h and h_bar)
  regression   least squares of the replies on the party's own c_hat - c: reads batch-mean
               replies and an active attacker's crafted requests (any reply format)
  derivative   multiclass heads: per-sample loss derivatives, classes placed with --aux N
               known labels
  nudge        multiclass, the active attacker's (train --adversary M:active,nudge[,aux=N]:
               every sample of its batches nudged by +-P, each batch asked about as many
               times as it holds samples): the derivative attack in windows of the run
  model        the reference: the party's own trained model as a label predictor (what it
               learns legitimately by training, from all the labels)
Label inference on TIG (split learning, train --algo tig) traffic, where the
aggregator replies the gradient dF0/dc of the party's outputs:
  tig-sign     the gradient's sign is -y for a logistic head (binary, one output a party)
  tig-norm     norm scoring (Li et al. 2022): the minority class has the larger gradients
  tig-direction
               direction scoring (Li et al. 2022): cosine similarity with the gradients of
               --aux N samples whose labels the attacker knows (multiclass: nearest class)
Feature inference by a curious aggregator (--as 0 --target M --aux N):
  feature      ridge regression from each sample's outputs over the evaluation rounds
               to the party's features, fitted on N auxiliary samples: R squared
Malicious parties act during training (asyrevel train --adversary M:KIND): their
effect is scored from the log with:
  backdoor     attack success rate and main-task accuracy (--summary FILE)
  inflate      main-task accuracy of a run with an inflating party (--summary FILE)
`

func cmdAttack(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, attackUsage)
		if len(args) == 0 {
			return fmt.Errorf("%w: attack needs a name", errUsage)
		}
		return nil
	}
	name, rest := args[0], args[1:]
	fs := newFlagSet("attack "+name, "asyrevel attack "+name+" (--store DIR | --nats URL) --run R --as M [--truth DATA] --out DIR", stderr)
	lf := addLogFlags(fs)
	as := fs.String("as", "", "the attacker: a party id, several colluding (1,2,3), or 0 (the aggregator)")
	truth := fs.String("truth", "", "the run's data (as given to train --data), read only by the scorer;\nwithout it the inference is written but not scored")
	test := fs.String("test", "", "the run's test set, if train had --test (backdoor scoring)")
	preset := fs.String("preset", "", "the run's --preset, if any")
	out := fs.String("out", "", "output folder for attack.json and attack.png")
	aux := fs.Int("aux", 0, "samples whose labels (derivative) or features (feature) the attacker knows")
	target := fs.Int("target", 0, "feature: the party whose features the aggregator infers")
	iters := fs.Int("iters", 100, "regression: CGLS iterations")
	summary := fs.String("summary", "", "the run's summary.json (backdoor, inflate)")
	seed := fs.Uint64("seed", 1, "seed of the run's synthetic data (--truth synthetic...)")
	targetClass := fs.Int("target-class", 1, "backdoor: the class the backdoor aims at")
	if err := fs.Parse(rest); err != nil {
		return usageErr(err)
	}
	if *out == "" {
		return fmt.Errorf("%w: attack needs --out DIR", errUsage)
	}
	parties, err := parseParties(*as)
	if err != nil {
		return err
	}
	switch name {
	case "sign", "loss", "regression", "derivative", "nudge", "model", "feature", "backdoor", "inflate",
		"tig-sign", "tig-norm", "tig-direction":
	default:
		return fmt.Errorf("%w: unknown attack %q\n\n%s", errUsage, name, attackUsage)
	}
	l, err := lf.open(ctx)
	defer lf.close()
	if err != nil {
		return err
	}
	defer l.Close()
	tr := &truthSource{path: *truth, test: *test, preset: *preset, seed: *seed}
	switch name {
	case "feature":
		return attackFeature(ctx, l, parties, *target, *aux, tr, *out, stdout)
	case "backdoor", "inflate":
		return attackMalicious(ctx, name, l, parties, tr, *summary, *targetClass, *out, stdout)
	}
	if len(parties) == 1 && parties[0] == 0 {
		return fmt.Errorf("%w: a label attack is by a party: --as M", errUsage)
	}
	v, err := privacy.ReadView(ctx, l, parties...)
	if err != nil {
		return err
	}
	var labels []int32
	var classes int
	if *truth != "" {
		d, err := tr.load(len(v.Evals), nparties(l, v))
		if err != nil {
			return err
		}
		labels, classes = d.TrainY, d.Classes
	}
	var inf *privacy.LabelInference
	switch name {
	case "sign":
		inf, err = privacy.SignAttack(v)
	case "loss":
		inf, err = privacy.LossAttack(v)
	case "regression":
		inf, err = privacy.RegressionAttack(v, *iters)
	case "model":
		inf, err = privacy.ModelAttack(v)
	case "derivative":
		if labels == nil {
			return fmt.Errorf("%w: the derivative attack places its classes with --aux N known labels: give --truth DATA", errUsage)
		}
		inf, err = privacy.DerivativeAttack(v, classes, privacy.KnownLabels(labels, *aux, *seed))
	case "nudge":
		if labels == nil {
			return fmt.Errorf("%w: the nudge attack places its classes with --aux N known labels: give --truth DATA", errUsage)
		}
		inf, err = privacy.NudgeAttack(v, classes, privacy.KnownLabels(labels, *aux, *seed), 0)
	case "tig-sign", "tig-norm", "tig-direction":
		var g *privacy.GradientView
		if g, err = v.Gradients(); err != nil {
			return err
		}
		switch name {
		case "tig-sign":
			inf, err = privacy.GradientSignAttack(g)
		case "tig-norm":
			inf, err = privacy.GradientNormAttack(g)
		default:
			if labels == nil || *aux < 1 {
				return fmt.Errorf("%w: the tig-direction attack compares gradients with those of --aux N samples whose labels it knows: give --truth DATA --aux N", errUsage)
			}
			inf, err = privacy.GradientDirectionAttack(g, classes, privacy.KnownLabels(labels, *aux, *seed))
		}
	}
	if err != nil {
		return err
	}
	if err := privacy.WriteInference(*out, inf); err != nil {
		return err
	}
	if labels == nil {
		fmt.Fprintf(stdout, "%s attack by %s: %d samples inferred (no --truth: not scored) -> %s\n", name, strings.Join(strings.Fields(*as), ""),
			len(inf.IDs), filepath.Join(*out, "inference.csv"))
		return nil
	}
	var others map[uint32]float64
	if name == "loss" && len(parties) == 1 {
		if others, err = privacy.OthersTruth(ctx, l, parties[0]); err != nil {
			return err
		}
	}
	s, err := privacy.ScoreLabels(inf, v, labels, others)
	if err != nil {
		return err
	}
	if err := privacy.WriteJSON(*out, "attack.json", s); err != nil {
		return err
	}
	if err := privacy.PlotLabels(filepath.Join(*out, "attack.png"), s); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s attack by %s on %s replies: %d of %d training labels covered, accuracy %.2f%% (majority class %.2f%%), AUC %.4f\n",
		name, s.Attacker, s.Format, s.Covered, s.Samples, 100*s.Accuracy, 100*s.Majority, s.AUC)
	if s.OthersR2 != nil {
		fmt.Fprintf(stdout, "recovered sum of the other parties' outputs: correlation %.4f with the truth (R squared %.4f)\n", *s.OthersCorr, *s.OthersR2)
	}
	fmt.Fprintf(stdout, "-> %s, %s\n", filepath.Join(*out, "attack.json"), filepath.Join(*out, "attack.png"))
	return nil
}

func parseParties(s string) ([]int, error) {
	if s == "" {
		return nil, fmt.Errorf("%w: give the attacker: --as M (a party), --as 1,2 (colluding) or --as 0 (the aggregator)", errUsage)
	}
	var ps []int
	for _, f := range strings.Split(s, ",") {
		m, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || m < 0 {
			return nil, fmt.Errorf("%w: --as %q: want party ids", errUsage, s)
		}
		ps = append(ps, m)
	}
	return ps, nil
}

// nparties is the number of parties of the run (from its hellos, which
// every view has).
func nparties(l *replay.Log, v *privacy.View) int {
	q := 0
	_ = l.Each(context.Background(), replay.ReadOptions{Raw: true, Kinds: []schemas.Kind{schemas.KindHello}}, func(r *replay.Record) error {
		q = max(q, r.Party)
		return nil
	})
	return q
}

// truthSource loads the ground truth for scorers.
type truthSource struct {
	path, test, preset string
	seed               uint64
}

func (t *truthSource) load(_ int, q int) (*run.Data, error) {
	if t.path == "" {
		return nil, fmt.Errorf("%w: this needs the ground truth: --truth DATA", errUsage)
	}
	cfg := run.New(func(c *run.Config) {
		c.Data = t.path
		c.Test = t.test
		c.Preset = t.preset
		c.Parties = q
	})
	if spec, ok := strings.CutPrefix(t.path, "synthetic"); ok && (spec == "" || spec[0] == ':') {
		sc, err := parseSynthetic(strings.TrimPrefix(spec, ":"), t.seed)
		if err != nil {
			return nil, err
		}
		cfg.Synthetic = &sc
	}
	if _, err := os.Stat(t.path); err != nil && cfg.Synthetic == nil {
		return nil, fmt.Errorf("--truth: %w", err)
	}
	d, err := run.LoadData(&cfg, run.RoleAll)
	if err != nil {
		return nil, fmt.Errorf("--truth: %w", err)
	}
	return d, nil
}

// attackFeature runs the curious aggregator's feature inference on party
// target.
func attackFeature(ctx context.Context, l *replay.Log, as []int, target, aux int, tr *truthSource, out string, stdout io.Writer) error {
	if len(as) != 1 || as[0] != 0 {
		return fmt.Errorf("%w: feature inference is by the aggregator: --as 0 --target M", errUsage)
	}
	if target < 1 {
		return fmt.Errorf("%w: feature: give the party whose features to infer: --target M", errUsage)
	}
	if aux < 2 {
		return fmt.Errorf("%w: feature: give the number of samples whose features the aggregator knows: --aux N", errUsage)
	}
	// A label-free run's party sent no request, only its codes: the
	// aggregator's view of it is its outputs all the same.
	v, err := privacy.ReadView(ctx, l, target)
	if err != nil && !errors.Is(err, privacy.ErrNoRequests) {
		return err
	}
	t, err := privacy.PartyTrajectories(v, target)
	if err != nil {
		return err
	}
	d, err := tr.load(0, nparties(l, v))
	if err != nil {
		return err
	}
	if target > len(d.PartTrain) {
		return fmt.Errorf("%w: party %d of a %d-party split", errUsage, target, len(d.PartTrain))
	}
	s, err := privacy.FeatureAttack(t, d.PartTrain[target-1], privacy.AuxSamples(t.N, aux, tr.seed))
	if err != nil {
		return err
	}
	s.Run = l.Run()
	if err := privacy.WriteJSON(out, "attack.json", s); err != nil {
		return err
	}
	if err := privacy.PlotFeatures(filepath.Join(out, "attack.png"), s); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "feature inference of party %d's %d features by the aggregator, from %d rounds of outputs and %d auxiliary samples: R squared %.4f, mean correlation %.4f on %d samples\n",
		target, s.Features, s.Rounds, s.Aux, s.R2, s.MeanCorr, s.Samples)
	if s.Note != "" {
		fmt.Fprintln(stdout, "note:", s.Note)
	}
	fmt.Fprintf(stdout, "-> %s, %s\n", filepath.Join(out, "attack.json"), filepath.Join(out, "attack.png"))
	return nil
}

func attackMalicious(ctx context.Context, name string, l *replay.Log, as []int, tr *truthSource, summary string, targetClass int, out string, stdout io.Writer) error {
	if len(as) != 1 || as[0] < 1 {
		return fmt.Errorf("%w: %s: give the malicious party: --as M", errUsage, name)
	}
	if summary == "" {
		return fmt.Errorf("%w: %s is scored with the head the aggregator ended with: give the run's --summary FILE", errUsage, name)
	}
	raw, err := os.ReadFile(summary)
	if err != nil {
		return fmt.Errorf("--summary: %w", err)
	}
	var s struct {
		HeadParams []float64    `json:"head_params"`
		Settings   run.Settings `json:"settings"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("--summary: %w", err)
	}
	q := s.Settings.Parties
	if q == 0 {
		return fmt.Errorf("%w: --summary %s has no settings (written by an older version)", errUsage, summary)
	}
	if tr.test == "" && tr.preset == "" && !strings.HasPrefix(tr.path, "synthetic") {
		return fmt.Errorf("%w: %s is scored on the test set: give --truth DATA --test TEST", errUsage, name)
	}
	d, err := tr.load(0, q)
	if err != nil {
		return err
	}
	if d.TestY == nil {
		return fmt.Errorf("%w: the truth has no test set", errUsage)
	}
	parties := make([]int, q)
	for i := range parties {
		parties[i] = i + 1
	}
	v, err := privacy.ReadView(ctx, l, parties...)
	if err != nil {
		return err
	}
	table, round, err := privacy.FinalTable(v, q, schemas.SplitTest)
	if err != nil {
		return err
	}
	cfg := run.Defaults()
	s.Settings.Apply(&cfg)
	head, k := run.NewHead(&cfg, d.Classes)
	w0 := s.HeadParams
	if len(w0) != head.NumParams() {
		return fmt.Errorf("%w: the summary holds %d head parameters, the head has %d", errUsage, len(w0), head.NumParams())
	}
	target := int32(-1)
	if name == "backdoor" {
		target = int32(targetClass)
	}
	sc, err := privacy.ScoreMalicious(table, q, k, head, w0, d.TestY, as[0], target, s.Settings.Defense.MaxOutput)
	if err != nil {
		return err
	}
	sc.Run, sc.Round = l.Run(), round
	if err := privacy.WriteJSON(out, "attack.json", sc); err != nil {
		return err
	}
	if err := privacy.PlotMalicious(filepath.Join(out, "attack.png"), sc); err != nil {
		return err
	}
	if name == "backdoor" {
		fmt.Fprintf(stdout, "backdoor by party %d (target class %d): attack success rate %.2f%% on %d triggered test samples, main-task accuracy %.2f%% on %d clean ones; its outputs are %.1fx the others'\n",
			as[0], target, 100*sc.ASR, sc.Triggered, 100*sc.Accuracy, sc.Samples, sc.Dominance)
	} else {
		fmt.Fprintf(stdout, "inflating party %d: main-task accuracy %.2f%% on %d test samples; its outputs are %.1fx the others'\n",
			as[0], 100*sc.Accuracy, sc.Samples, sc.Dominance)
	}
	fmt.Fprintf(stdout, "-> %s, %s\n", filepath.Join(out, "attack.json"), filepath.Join(out, "attack.png"))
	return nil
}
