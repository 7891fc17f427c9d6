package experiment

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/privacy"
	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/run"
)

// PrivacySetting is one wire format or defense of the privacy experiment.
type PrivacySetting struct {
	Name  string
	About string
	// Apply sets the defense (and the batch size and step size it needs).
	Apply func(c *run.Config)
	// TIG marks the split-learning baseline: it trains with --algo tig
	// (its default step size), and is attacked by the gradient attacks.
	TIG bool
}

// PrivacyConfig configures the privacy experiment.
type PrivacyConfig struct {
	// Sets are the data sets by name ("a9a", "mnist"), loaded for Parties.
	Sets     map[string]*run.Data
	Order    []string
	Settings map[string][]PrivacySetting // per set
	Parties  int
	Epochs   map[string]float64 // per set
	Seeds    []uint64
	Attacker int // the attacking party (passive and active)
	Aux      int // labels the attacker knows (derivative attack, TIG direction scoring)
	// Store is the folder for the runs' stores (each removed once read).
	Store   string
	Timeout time.Duration // per run (default 10 min)
	Log     zerolog.Logger
}

// PrivacyRow is one (run, attack) measurement.
type PrivacyRow struct {
	Set, Setting, Attacker, Attack string
	Seed                           uint64
	AUC, AttackAccuracy            float64
	MaxClassAUC                    float64 // the largest one-vs-rest AUC over the classes (binary: AUC)
	Covered                        int
	TestAccuracy                   float64
	Epsilon, EpsilonAll, AUCBound  float64 // per-party worst, all parties, bound
	Note                           string
	// Positives are the covered samples of the class whose one-vs-rest
	// AUC is MaxClassAUC (binary: of label 1), the others its negatives:
	// the counts a Hanley-McNeil interval of that AUC needs (0: unknown).
	Positives int
}

// DefaultPrivacySettings are the settings of the experiment for a binary
// (a9a) and a multiclass (MNIST) set.
func DefaultPrivacySettings(quick bool) map[string][]PrivacySetting {
	mean := func(b int, lr float64) func(*run.Config) {
		return func(c *run.Config) {
			c.Batch, c.Defense.Reply, c.Defense.MinBatch = b, "mean", b
			if lr > 0 {
				c.LR = lr
			}
		}
	}
	dpz := func(z float64, auc float64) func(*run.Config) {
		return func(c *run.Config) {
			mean(256, 0.5)(c)
			c.Defense.Clip, c.Defense.NoiseMultiplier, c.Defense.DrawBatches = 1e-3, z, true
			c.Defense.DPAUC = auc
		}
	}
	rr := func(eps float64) func(*run.Config) {
		return func(c *run.Config) { c.Defense.LabelEpsilon = eps }
	}
	tig := PrivacySetting{Name: "tig", About: "split learning (TIG): gradients dF0/dc travel", TIG: true}
	a9a := []PrivacySetting{
		tig,
		{Name: "paper", About: "the paper's replies: h and h_bar per sample", Apply: func(*run.Config) {}},
		{Name: "delta", About: "h_bar - h per sample", Apply: func(c *run.Config) { c.Defense.Reply = "delta" }},
		{Name: "mean-b64", About: "batch mean of h_bar - h, at least 64 samples", Apply: mean(64, 0)},
		{Name: "mean-b256", About: "batch mean, at least 256 samples (lr 0.5)", Apply: mean(256, 0.5)},
		{Name: "dp-z3", About: "mean-b256, clip 1e-3, noise 3x sensitivity, aggregator batches", Apply: dpz(3, 0)},
		{Name: "dp-z6", About: "mean-b256, clip 1e-3, noise 6x sensitivity, aggregator batches", Apply: dpz(6, 0)},
		{Name: "dp-z10", About: "mean-b256, clip 1e-3, noise 10x sensitivity, aggregator batches", Apply: dpz(10, 0)},
		{Name: "dp-auc0.7", About: "dp-z5 with a per-party budget: AUC bound 0.7 per label", Apply: dpz(5, 0.7)},
		{Name: "dp-auc0.6", About: "dp-z8 with a per-party budget: AUC bound 0.6 per label", Apply: dpz(8, 0.6)},
		{Name: "rr-eps0.4", About: "randomised response, epsilon ln 1.5 (AUC bound 0.6)", Apply: rr(math.Log(1.5))},
		{Name: "rr-eps1", About: "randomised response, epsilon 1", Apply: rr(1)},
		{Name: "rr-eps2", About: "randomised response, epsilon 2", Apply: rr(2)},
	}
	// MNIST: the softmax head has parameters, and every party's step moves
	// it, so its noised step spends each label's budget 8 times faster
	// than a reply: its noise is a multiple of the replies' and its step
	// size smaller. One output per party makes the signal per step weak.
	mdp := func(z, head, headLR, auc float64) func(*run.Config) {
		return func(c *run.Config) {
			mean(64, 0)(c)
			c.Defense.Clip, c.Defense.NoiseMultiplier, c.Defense.DrawBatches = 1e-2, z, true
			c.Defense.HeadNoise, c.HeadLR, c.Defense.DPAUC = head, headLR, auc
		}
	}
	mnist := []PrivacySetting{
		tig,
		{Name: "paper", About: "the paper's replies: h and h_bar per sample", Apply: func(*run.Config) {}},
		{Name: "mean-b64", About: "batch mean of h_bar - h, at least 64 samples", Apply: mean(64, 0)},
		{Name: "dp-z2", About: "mean-b64, clip 1e-2, noise 2x, head noise 4x (head lr 0.01), aggregator batches", Apply: mdp(2, 4, 0.01, 0)},
		{Name: "dp-auc0.6", About: "mean-b64, clip 1e-2, noise 6.3x, head noise 8x (head lr 0.005), per-party budget at AUC 0.6", Apply: mdp(6.3, 8, 0.005, 0.6)},
		{Name: "rr-eps3", About: "randomised response, epsilon 3 (keeps 69% of the labels)", Apply: rr(3)},
		{Name: "rr-eps4", About: "randomised response, epsilon 4 (keeps 86%)", Apply: rr(4)},
		// The budget defense, which --privacy auc=0.6 chose before the
		// label-free profile: without profile=budget the switch now picks
		// the label-free profile, and the row would measure that instead.
		{Name: "auc0.6", About: "--privacy auc=0.6,profile=budget (the multiclass budget profile): first-order head (inputs clipped to norm 2, noised), " +
			"batch means clipped to 5 mu over batches of 512, per-label budget at AUC 0.6", Apply: func(c *run.Config) { c.Privacy = BudgetPrivacy }},
	}
	if quick {
		keep := func(s []PrivacySetting, names ...string) []PrivacySetting {
			var out []PrivacySetting
			for _, x := range s {
				if slices.Contains(names, x.Name) {
					out = append(out, x)
				}
			}
			return out
		}
		a9a = keep(a9a, "tig", "paper", "mean-b256", "dp-z6", "dp-auc0.6", "rr-eps1")
		mnist = keep(mnist, "tig", "paper", "mean-b64", "rr-eps4", "auc0.6")
	}
	// The networks' rows at the length the defenses were measured at
	// (--net-epochs): the undefended replies, the earlier multiclass
	// default (batch means of 256) and the bounded profile.
	nets := keepNames(mnist, "paper", "auc0.6")
	nets = append(nets[:1:1], append([]PrivacySetting{{Name: "mean-b256", About: "batch mean, at least 256 samples: the earlier multiclass default (no bound)",
		Apply: mean(256, 0)}}, nets[1:]...)...)
	return map[string][]PrivacySetting{"a9a": a9a, "mnist": mnist, "networks": nets}
}

func keepNames(s []PrivacySetting, names ...string) []PrivacySetting {
	var out []PrivacySetting
	for _, x := range s {
		if slices.Contains(names, x.Name) {
			out = append(out, x)
		}
	}
	return out
}

// Privacy runs the privacy experiment: for every set, setting and seed, a
// run with honest parties (attacked passively by party Attacker, from its
// own view, after the run) and a run where party Attacker is the active
// attacker (it perturbs one sample per request), each over the embedded
// JetStream broker; attacks read the runs' logs through package replay.
func Privacy(ctx context.Context, cfg PrivacyConfig) ([]PrivacyRow, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Minute
	}
	if cfg.Attacker == 0 {
		cfg.Attacker = 3
	}
	var rows []PrivacyRow
	for _, set := range cfg.Order {
		data := cfg.Sets[set]
		if data == nil {
			continue
		}
		for _, st := range cfg.Settings[set] {
			for _, seed := range cfg.Seeds {
				for _, active := range []bool{false, true} {
					r, err := privacyRun(ctx, &cfg, set, data, st, seed, active)
					if err != nil {
						return rows, fmt.Errorf("%s %s seed %d active %v: %w", set, st.Name, seed, active, err)
					}
					rows = append(rows, r...)
				}
			}
		}
	}
	return rows, nil
}

func privacyRun(ctx context.Context, cfg *PrivacyConfig, set string, data *run.Data, st PrivacySetting, seed uint64, active bool) ([]PrivacyRow, error) {
	who := "passive"
	if active {
		who = "active"
	}
	runID := strings.NewReplacer(".", "_").Replace(fmt.Sprintf("priv-%s-%s-%s-%d", set, st.Name, who, seed))
	store := filepath.Join(cfg.Store, runID)
	defer os.RemoveAll(store)
	tc := run.New(func(c *run.Config) {
		c.Parties = cfg.Parties
		c.Algo = "asyrevel-gau"
		c.NoBias = data.Classes == 2
		c.Epochs = cfg.Epochs[set]
		c.Seed = seed
		c.Run = runID
		c.StoreDir = store
		c.EvalEvery = 2 * time.Second
	})
	if st.TIG {
		tc.Algo = "tig"
	}
	if st.Apply != nil {
		st.Apply(&tc)
	}
	if tc.LR == 0 && !st.TIG {
		tc.LR = run.DefaultLR(tc.Model, max(tc.Batch, 64))
	}
	known := privacy.KnownLabels(data.TrainY, cfg.Aux, seed)
	hooks := run.Hooks{Loaded: data}
	switch {
	case active && st.TIG:
		// TIG's replies are already per sample: the active party asks about
		// one sample at a time (batches of one, cycling through the
		// training set), so that it covers every sample.
		hooks.Adversaries = map[int]party.Adversary{cfg.Attacker: &privacy.Active{One: true}}
	case active:
		a := &privacy.Active{Perturb: 0.05}
		hooks.Adversaries = map[int]party.Adversary{cfg.Attacker: a}
		if data.Classes > 2 {
			a.Prefer = map[uint32]bool{}
			for id := range known {
				a.Prefer[id] = true
			}
			// The multiclass active attacker nudges every sample of its
			// batches (privacy.Active's Nudge), at another party.
			hooks.Adversaries[nudgeParty(cfg)] = &privacy.Active{Nudge: true, Perturb: 0.05, Prefer: a.Prefer}
		}
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	t0 := time.Now()
	s, err := run.Train(rctx, tc, hooks)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("the run did not finish within %v: %w", cfg.Timeout, err)
		}
		return nil, err
	}
	base := PrivacyRow{Set: set, Setting: st.Name, Attacker: who, Seed: seed, TestAccuracy: s.TestAccuracy,
		Epsilon: inf, EpsilonAll: inf, AUCBound: 1}
	if d := s.Defense; d != nil && d.Accounting != nil {
		base.Epsilon, base.EpsilonAll, base.AUCBound = d.Accounting.Epsilon, d.Accounting.EpsilonAll, d.Accounting.AUCBound
	}
	l, err := replay.Open(ctx, replay.Source{Store: store, Run: runID})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	rows, err := labelAttacks(ctx, labelTarget{log: l, summary: s, labels: data.TrainY, classes: data.Classes,
		attacker: cfg.Attacker, nudger: nudgeParty(cfg), active: active, tig: st.TIG, known: known, seed: seed}, base)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		cfg.Log.Info().Str("set", set).Str("setting", st.Name).Str("attacker", who).Str("attack", r.Attack).
			Str("auc", fmtF(r.AUC, 4)).Str("test_acc", fmtF(100*r.TestAccuracy, 2)).Str("eps", fmtF(r.Epsilon, 3)).
			Str("took", time.Since(t0).Round(100*time.Millisecond).String()).Msg("privacy")
	}
	return rows, nil
}

// nudgeParty is the party of the multiclass active runs that nudges every
// sample (the attacker of the single-sample perturbation is cfg.Attacker).
func nudgeParty(cfg *PrivacyConfig) int {
	if cfg.Attacker == cfg.Parties {
		return 1
	}
	return cfg.Parties
}

// PrivacySummary is a (set, setting, attacker, attack) averaged over the
// seeds, with the accuracy drop against the undefended paper setting and
// the VFLAIR defense capability score.
type PrivacySummary struct {
	Set, Setting, Attacker, Attack string
	AUC, AUCSD                     float64
	MaxClassAUC                    float64 // mean over the seeds of the largest one-vs-rest AUC
	AttackAccuracy                 float64
	TestAccuracy, TestSD           float64
	DropPP                         float64
	Epsilon, EpsilonAll, AUCBound  float64
	Covered                        int
	Seeds                          int
	// DCS is VFLAIR's defense capability score 1/(1+sqrt(((AP-AP*)^2 +
	// (MP*-MP)^2)/2)) with AP the attack's accuracy and AP* = 0, MP the
	// test accuracy and MP* the undefended one (beta = 0.5); DCSAUC uses
	// the attack's advantage 2|AUC - 0.5| as AP instead.
	DCS, DCSAUC float64
	Note        string
	// Positives are, in the first seed's run (as Covered), the covered
	// samples of the class of its largest one-vs-rest AUC (binary: of
	// label 1); 0: unknown.
	Positives int
}

// SummarizePrivacy averages rows over seeds.
func SummarizePrivacy(rows []PrivacyRow) []PrivacySummary {
	type key struct{ set, setting, attacker, attack string }
	var order []key
	groups := map[key][]PrivacyRow{}
	for _, r := range rows {
		k := key{r.Set, r.Setting, r.Attacker, r.Attack}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	// The undefended accuracy per set: the paper setting's passive runs.
	ref := map[string]float64{}
	for _, set := range uniqueSets(rows) {
		var acc []float64
		seen := map[uint64]bool{}
		for _, r := range rows {
			if r.Set == set && r.Setting == "paper" && r.Attacker == "passive" && !seen[r.Seed] {
				seen[r.Seed] = true
				acc = append(acc, r.TestAccuracy)
			}
		}
		ref[set], _ = meanSD(acc)
	}
	var out []PrivacySummary
	for _, k := range order {
		g := groups[k]
		var aucs, accs, aacc, cls []float64
		for _, r := range g {
			aucs, accs, aacc = append(aucs, r.AUC), append(accs, r.TestAccuracy), append(aacc, r.AttackAccuracy)
			if r.MaxClassAUC == 0 {
				r.MaxClassAUC = r.AUC
			}
			cls = append(cls, r.MaxClassAUC)
		}
		s := PrivacySummary{Set: k.set, Setting: k.setting, Attacker: k.attacker, Attack: k.attack, Seeds: len(g),
			Epsilon: g[0].Epsilon, EpsilonAll: g[0].EpsilonAll, AUCBound: g[0].AUCBound, Covered: g[0].Covered, Note: g[0].Note,
			Positives: g[0].Positives}
		for _, r := range g[1:] {
			s.Epsilon, s.EpsilonAll, s.AUCBound = max(s.Epsilon, r.Epsilon), max(s.EpsilonAll, r.EpsilonAll), max(s.AUCBound, r.AUCBound)
		}
		s.AUC, s.AUCSD = meanSD(aucs)
		s.MaxClassAUC, _ = meanSD(cls)
		s.TestAccuracy, s.TestSD = meanSD(accs)
		s.AttackAccuracy, _ = meanSD(aacc)
		s.DropPP = 100 * (ref[k.set] - s.TestAccuracy)
		s.DCS = dcs(s.AttackAccuracy, s.TestAccuracy, ref[k.set])
		s.DCSAUC = dcs(2*math.Abs(s.AUC-0.5), s.TestAccuracy, ref[k.set])
		out = append(out, s)
	}
	return out
}

func dcs(ap, mp, mp0 float64) float64 {
	if math.IsNaN(ap) || math.IsNaN(mp) {
		return nanF
	}
	dap, dmp := max(ap, 0), max(mp0-mp, 0)
	return 1 / (1 + math.Sqrt(0.5*dap*dap+0.5*dmp*dmp))
}

func uniqueSets(rows []PrivacyRow) []string {
	var sets []string
	for _, r := range rows {
		if !slices.Contains(sets, r.Set) {
			sets = append(sets, r.Set)
		}
	}
	return sets
}

func meanSD(x []float64) (float64, float64) {
	var n, m float64
	for _, v := range x {
		if !math.IsNaN(v) {
			m += v
			n++
		}
	}
	if n == 0 {
		return nanF, nanF
	}
	m /= n
	var s float64
	for _, v := range x {
		if !math.IsNaN(v) {
			s += (v - m) * (v - m)
		}
	}
	if n < 2 {
		return m, 0
	}
	return m, math.Sqrt(s / (n - 1))
}

// WritePrivacy writes privacy.csv (setting, attacker, attack, auc,
// test_accuracy, accuracy_drop_pp, epsilon, then the details) into dir,
// records the run with cmdline (one command, or several separated by "; ")
// and writes the report again (REPORT-privacy.md and privacy.png, from the
// CSV). A privacy.csv written again unchanged (--report-only) keeps the
// run that made it.
func WritePrivacy(dir string, sum []PrivacySummary, cmdline string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	num := func(v float64, p int) string {
		switch {
		case math.IsNaN(v):
			return ""
		case math.IsInf(v, 1):
			return "inf"
		}
		return fmtF(v, p)
	}
	header := []string{"setting", "attacker", "attack", "auc", "test_accuracy", "accuracy_drop_pp", "epsilon",
		"dataset", "auc_sd", "attack_accuracy", "test_accuracy_sd", "epsilon_all_parties", "auc_bound", "samples_covered", "seeds", "dcs", "dcs_auc", "note", "max_class_auc",
		"class_positives"}
	var recs [][]string
	for _, s := range sum {
		recs = append(recs, []string{s.Setting, s.Attacker, s.Attack, num(s.AUC, 4), num(s.TestAccuracy, 4), num(s.DropPP, 2), num(s.Epsilon, 3),
			s.Set, num(s.AUCSD, 4), num(s.AttackAccuracy, 4), num(s.TestSD, 4), num(s.EpsilonAll, 3), num(s.AUCBound, 3),
			strconv.Itoa(s.Covered), strconv.Itoa(s.Seeds), num(s.DCS, 4), num(s.DCSAUC, 4), s.Note, num(s.MaxClassAUC, 4),
			positives(s.Positives, s.Covered)})
	}
	path := filepath.Join(dir, "privacy.csv")
	before, _ := os.ReadFile(path)
	if err := run.WriteCSV(path, header, recs); err != nil {
		return err
	}
	if after, err := os.ReadFile(path); err == nil && bytes.Equal(before, after) {
		return writeReport(dir)
	}
	return WriteSection(dir, Section{Name: "privacy", Command: strings.ReplaceAll(cmdline, "; ", "\n")})
}

// positives is a class count for the CSV: "" when unknown or when it
// leaves no negative.
func positives(n, covered int) string {
	if n <= 0 || n >= covered {
		return ""
	}
	return strconv.Itoa(n)
}

// ReadPrivacyCSV reads back a privacy.csv that WritePrivacy wrote, to
// write its plot and report again (asyrevel experiment privacy
// --report-only).
func ReadPrivacyCSV(path string) ([]PrivacySummary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(recs) < 1 || len(recs[0]) < 18 || recs[0][0] != "setting" {
		return nil, fmt.Errorf("%s: not a privacy.csv of this version", path)
	}
	num := func(s string) float64 {
		switch s {
		case "":
			return nanF
		case "inf":
			return inf
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nanF
		}
		return v
	}
	var out []PrivacySummary
	for _, r := range recs[1:] {
		covered, _ := strconv.Atoi(r[13])
		seeds, _ := strconv.Atoi(r[14])
		out = append(out, PrivacySummary{Setting: r[0], Attacker: r[1], Attack: r[2], AUC: num(r[3]), TestAccuracy: num(r[4]),
			DropPP: num(r[5]), Epsilon: num(r[6]), Set: r[7], AUCSD: num(r[8]), AttackAccuracy: num(r[9]), TestSD: num(r[10]),
			EpsilonAll: num(r[11]), AUCBound: num(r[12]), Covered: covered, Seeds: seeds, DCS: num(r[15]), DCSAUC: num(r[16]), Note: r[17]})
		// Written since the multiclass attacks' per-class AUCs; older files
		// have no such column: the AUC stands for it.
		o := &out[len(out)-1]
		if o.MaxClassAUC = o.AUC; len(r) > 18 && r[18] != "" {
			o.MaxClassAUC = num(r[18])
		}
		// Since the report's Hanley-McNeil intervals; older files: unknown.
		if len(r) > 19 {
			o.Positives, _ = strconv.Atoi(r[19])
		}
	}
	return out, nil
}

// MergePrivacy puts the summaries of a partial run (some settings only)
// into those of an earlier one: the (set, setting) groups of fresh replace
// the old ones in place (new ones are appended), and the accuracy drops and
// defense scores of fresh rows are recomputed against the undefended
// `paper` setting of the merged result, when fresh did not run it.
func MergePrivacy(old, fresh []PrivacySummary) []PrivacySummary {
	type key struct{ set, setting string }
	redone := map[key]bool{}
	for _, s := range fresh {
		redone[key{s.Set, s.Setting}] = true
	}
	var out []PrivacySummary
	placed := map[key]bool{}
	for _, s := range old {
		k := key{s.Set, s.Setting}
		if !redone[k] {
			out = append(out, s)
			continue
		}
		if !placed[k] {
			placed[k] = true
			for _, f := range fresh {
				if f.Set == k.set && f.Setting == k.setting {
					out = append(out, f)
				}
			}
		}
	}
	for _, f := range fresh {
		if !placed[key{f.Set, f.Setting}] {
			out = append(out, f)
		}
	}
	ref := map[string]float64{}
	for _, s := range out {
		if s.Setting == "paper" && s.Attacker == "passive" {
			ref[s.Set] = s.TestAccuracy
		}
	}
	for i := range out {
		s := &out[i]
		r, ok := ref[s.Set]
		if !ok || !redone[key{s.Set, s.Setting}] || redone[key{s.Set, "paper"}] {
			continue
		}
		s.DropPP = 100 * (r - s.TestAccuracy)
		s.DCS = dcs(s.AttackAccuracy, s.TestAccuracy, r)
		s.DCSAUC = dcs(2*math.Abs(s.AUC-0.5), s.TestAccuracy, r)
	}
	return out
}
