package experiment

import (
	"context"
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

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/privacy"
	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/run"
)

// The goal rows of the privacy experiment (issue 31, "defended runs that
// learn"): each row is one `asyrevel train` run as a user types it, with
// the default privacy or --privacy off beside it at the same length, its
// privacy.json bound, and the strongest passive and active label attacks
// read from its log; some rows also get the curious aggregator's feature
// inference. Written to privacy-goal.csv and privacy-goal-feature.csv.

// GoalLengthNone is the length of a run given no length flag: it stops by
// itself (early stopping, or the label-free fit's convergence).
const GoalLengthNone = "none"

// PrivacyDefault is a goal row's privacy when the run gives no --privacy
// flag (run.DefaultPrivacy applies, as for a user).
const PrivacyDefault = "default"

// BudgetPrivacy is the budget defense at the default's bound: the profile
// --privacy auc=0.6 chose before the label-free one, which it chooses now
// wherever it can.
const BudgetPrivacy = "auc=0.6,profile=budget"

// GoalRun is one configuration of the goal rows: the commands that make
// its data (the small tables) and train it.
type GoalRun struct {
	Set     string // breast-cancer, wine, a9a, mnist, fashion-mnist (syn-* in the quick form)
	Length  string // the --duration given, or GoalLengthNone
	Algo    string
	Privacy string // PrivacyDefault, off, or the --privacy switch given
	Seed    uint64 // the split's seed (small tables), else the run's
	// Split, if set, are `asyrevel data split` arguments (DATA last) that
	// make the run's data: GoalSplitDir in Split and Train stands for the
	// folder it writes.
	Split []string
	Train []string // `asyrevel train` arguments
	// Show replaces paths by what the report prints (the data folder as
	// "data/..."), for the command column.
	Show map[string]string
	// Feature: the curious aggregator's feature inference runs on the
	// passive run's log too.
	Feature bool
}

// GoalSplitDir stands in a GoalRun's arguments for the split folder.
const GoalSplitDir = "SPLIT"

// Command is the run's command lines as a user types them ("; " between
// the data split and the training).
func (g GoalRun) Command() string {
	show := func(args []string) string {
		out := make([]string, len(args))
		for i, a := range args {
			out[i] = a
			if s, ok := g.Show[a]; ok {
				out[i] = s
			}
		}
		return strings.Join(out, " ")
	}
	c := "asyrevel train " + show(g.Train)
	if len(g.Split) > 0 {
		c = "asyrevel data split --out " + GoalSplitDir + " " + show(g.Split) + "; " + c
	}
	return c
}

// GoalData are the files of the goal rows' sets ("" leaves a set out).
type GoalData struct {
	A9A, A9ATest        string // LIBSVM files
	MNIST, FashionMNIST string // IDX folders
	BreastCancer, Wine  string // scikit-learn's CSV files (breast_cancer.csv, wine_data.csv)
	// Show maps the paths above to what the report prints.
	Show map[string]string
}

// GoalSets are the goal rows' sets, cheapest first.
var GoalSets = []string{"breast-cancer", "wine", "a9a", "mnist", "fashion-mnist"}

// GoalA9AAlgos are the algorithms of the a9a rows: those the privacy
// switch defends.
var GoalA9AAlgos = []string{"asyrevel-gau", "asyrevel-uni", "synrevel-gau", "nonf"}

// GoalPlanOptions choose the goal rows.
type GoalPlanOptions struct {
	Data    GoalData
	Sets    []string // of GoalSets (empty: all)
	Lengths []string // keep only these lengths ("90s", "15m", "none"; empty: all)
	Algos   []string // a9a: keep only these (empty: GoalA9AAlgos)
	Seeds   []uint64 // the small tables' split seeds
	// Budget adds the earlier default (--privacy auc=0.6,profile=budget)
	// beside the MNIST 90 s and a9a 20 s rows.
	Budget bool
}

// GoalPlan is the goal rows: the small tables over the seeds with no
// length flag; a9a at 10 s, 20 s, 60 s and none for each algorithm the
// switch defends; MNIST and Fashion-MNIST at make run's 90 s and at 15
// minutes with the paper's network; each with the default privacy and
// --privacy off. The feature inference runs on MNIST 90 s and a9a 20 s
// (asyrevel-gau).
func GoalPlan(o GoalPlanOptions) ([]GoalRun, error) {
	sets := o.Sets
	if len(sets) == 0 {
		sets = GoalSets
	}
	for _, s := range sets {
		if !slices.Contains(GoalSets, s) {
			return nil, planError(fmt.Sprintf("--sets: %q (the goal rows have %s)", s, strings.Join(GoalSets, ", ")))
		}
	}
	algos := o.Algos
	if len(algos) == 0 {
		algos = GoalA9AAlgos
	}
	for _, a := range algos {
		if !slices.Contains(GoalA9AAlgos, a) {
			return nil, planError(fmt.Sprintf("--algos: %q (the a9a rows have %s)", a, strings.Join(GoalA9AAlgos, ", ")))
		}
	}
	keepLen := func(l string) bool { return len(o.Lengths) == 0 || slices.Contains(o.Lengths, l) }
	privs := func(extra bool) []string {
		p := []string{PrivacyDefault, "off"}
		if extra && o.Budget {
			p = append(p, BudgetPrivacy)
		}
		return p
	}
	withPrivacy := func(args []string, p string) []string {
		if p == PrivacyDefault {
			return args
		}
		return append(slices.Clone(args), "--privacy", p)
	}
	var out []GoalRun
	for _, set := range sets {
		switch set {
		case "breast-cancer", "wine":
			if !keepLen(GoalLengthNone) {
				continue
			}
			csv := o.Data.BreastCancer
			if set == "wine" {
				csv = o.Data.Wine
			}
			if csv == "" {
				return nil, planError(fmt.Sprintf("%s: no CSV file (scikit-learn's)", set))
			}
			for _, seed := range o.Seeds {
				split := []string{"--parties", "3", "--test-fraction", "0.2", "--stratify", "--scale", "standard", "--seed", strconv.FormatUint(seed, 10), csv}
				for _, p := range privs(false) {
					out = append(out, GoalRun{Set: set, Length: GoalLengthNone, Algo: "asyrevel-gau", Privacy: p, Seed: seed, Split: split,
						Train: withPrivacy([]string{"--data", GoalSplitDir}, p), Show: o.Data.Show})
				}
			}
		case "a9a":
			if o.Data.A9A == "" {
				return nil, planError("a9a: no data")
			}
			for _, algo := range algos {
				for _, l := range []string{"10s", "20s", "60s", GoalLengthNone} {
					if !keepLen(l) {
						continue
					}
					args := []string{"--data", o.Data.A9A, "--test", o.Data.A9ATest}
					if algo != "nonf" {
						args = append(args, "--parties", "8")
					}
					args = append(args, "--algo", algo)
					if l != GoalLengthNone {
						args = append(args, "--duration", l)
					}
					for _, p := range privs(algo == "asyrevel-gau" && l == "20s") {
						out = append(out, GoalRun{Set: set, Length: l, Algo: algo, Privacy: p, Seed: 1, Train: withPrivacy(args, p),
							Show: o.Data.Show, Feature: algo == "asyrevel-gau" && l == "20s" && p != BudgetPrivacy})
					}
				}
			}
		case "mnist", "fashion-mnist":
			dir := o.Data.MNIST
			if set == "fashion-mnist" {
				dir = o.Data.FashionMNIST
			}
			if dir == "" {
				return nil, planError(set + ": no data")
			}
			for _, l := range []string{"90s", "15m"} {
				if !keepLen(l) {
					continue
				}
				// make run's command (Makefile), at its length and at 15 minutes.
				args := []string{"--data", dir, "--parties", "8", "--model", "mlp", "--algo", "asyrevel-gau", "--duration", l}
				for _, p := range privs(set == "mnist" && l == "90s") {
					out = append(out, GoalRun{Set: set, Length: l, Algo: "asyrevel-gau", Privacy: p, Seed: 1, Train: withPrivacy(args, p),
						Show: o.Data.Show, Feature: set == "mnist" && l == "90s" && p != BudgetPrivacy})
				}
			}
		}
	}
	return out, nil
}

// GoalQuickPlan is the goal rows' short form, on tiny synthetic sets (a
// test runs it end to end): a small table written as a LIBSVM file into
// dir and split as the small tables are (two seeds), a binary set with
// asyrevel-gau and nonf, a 10-class set with the paper's network; each
// default and off, 2 s or no length.
func GoalQuickPlan(dir string) ([]GoalRun, error) {
	table := filepath.Join(dir, "table.libsvm")
	tr, _, err := dataset.Synthetic(dataset.SyntheticConfig{Samples: 240, Features: 9, Classes: 2, Noise: 0.05, Seed: 7})
	if err != nil {
		return nil, err
	}
	f, err := os.Create(table)
	if err != nil {
		return nil, err
	}
	if err := dataset.WriteLIBSVM(f, tr); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	show := map[string]string{table: "table.libsvm"}
	var out []GoalRun
	for _, seed := range []uint64{1, 2} {
		split := []string{"--parties", "3", "--test-fraction", "0.2", "--stratify", "--scale", "standard", "--seed", strconv.FormatUint(seed, 10), table}
		for _, p := range []string{PrivacyDefault, "off"} {
			train := []string{"--data", GoalSplitDir}
			if p == "off" {
				train = append(train, "--privacy", "off")
			}
			out = append(out, GoalRun{Set: "syn-table", Length: GoalLengthNone, Algo: "asyrevel-gau", Privacy: p, Seed: seed, Split: split, Train: train, Show: show})
		}
	}
	bin := "synthetic:n=1200,d=16,test=200,noise=0.02"
	multi := "synthetic:n=1500,d=16,test=200,classes=10,noise=0.02"
	for _, c := range []struct {
		set, algo string
		args      []string
		feature   bool
	}{
		{"syn-binary", "asyrevel-gau", []string{"--data", bin, "--parties", "4", "--algo", "asyrevel-gau", "--duration", "2s"}, true},
		{"syn-binary", "nonf", []string{"--data", bin, "--algo", "nonf", "--duration", "2s"}, false},
		{"syn-multi", "asyrevel-gau", []string{"--data", multi, "--parties", "4", "--model", "mlp", "--algo", "asyrevel-gau", "--duration", "2s"}, true},
	} {
		for _, p := range []string{PrivacyDefault, "off"} {
			args := c.args
			if p == "off" {
				args = append(slices.Clone(args), "--privacy", "off")
			}
			out = append(out, GoalRun{Set: c.set, Length: "2s", Algo: c.algo, Privacy: p, Seed: 1, Train: args, Feature: c.feature})
		}
	}
	return out, nil
}

// GoalConfig configures the goal rows' runs.
type GoalConfig struct {
	Runs []GoalRun
	// Build parses `asyrevel train` arguments into a run's configuration
	// exactly as the command does (the command line supplies it), and
	// Split runs `asyrevel data split` with its arguments.
	Build func(args []string) (run.Config, error)
	Split func(args []string) error
	// Attacker is the attacking party (3; the last party of a smaller
	// run); Aux the labels it knows (the multiclass attacks place the
	// classes with them).
	Attacker, Aux int
	// Active: each row gets a second run with party Attacker active (a
	// multiclass set's second attacker nudging every sample), the same
	// flags, its --duration capped at ActiveMax if that is shorter (0: no
	// cap).
	Active    bool
	ActiveMax time.Duration
	// ActiveLength, if set, is the active run's --duration instead of the
	// row's (before ActiveMax caps it). The attacker isolates one sample
	// a request; under a per-label budget its requests end when the
	// budget is spent, so past that a longer run covers no more samples
	// (MNIST's budget row: 108 at 5 minutes, 50 and 281 at 90 s). The
	// active run's own bound, when it differs from the row's, is in the
	// attack's note.
	ActiveLength time.Duration
	// FeatureAux is the number of samples whose features the curious
	// aggregator knows; FeatureTarget the party it infers (1).
	FeatureAux, FeatureTarget int
	// Store is the folder for the runs' stores and splits (each removed
	// once read).
	Store string
	// Timeout bounds each run beyond its length (default 15 min).
	Timeout time.Duration
	Log     zerolog.Logger
	// OnRow, if set, is called after each row with the rows so far (to
	// write the CSV files as they grow).
	OnRow func(rows []GoalRow, feats []FeatureRow) error
}

// GoalAttack is the strongest label attack of one attacker on a run's log.
type GoalAttack struct {
	Attack      string  // the attack's name, AttackNone, or "" when not run
	AUC         float64 // NaN: none ran
	MaxClassAUC float64
	Covered     int
	// Positives are the covered samples of the class of MaxClassAUC
	// (binary: label 1; 0: unknown), the rest of Covered its negatives.
	Positives int
	Note      string
}

// GoalRow is one goal row: a run with honest parties (its accuracy and
// the passive attack) and, if asked, the same run with an active attacker.
type GoalRow struct {
	GoalRun
	Profile, StoppedBy               string
	Parties                          int
	TestAccuracy                     float64
	WallSeconds, TrainSeconds        float64
	FitEpochs, FitBestEpoch, FitRows int // the label-free head's fit (0: not label-free)
	AUCBound, AUCBoundAll, Epsilon   float64
	Passive, Active                  GoalAttack
	ActiveLength                     string // the active run's --duration ("" = the row's)
	ActiveAccuracy                   float64
	Started                          time.Time
	LoadStart, LoadEnd               float64 // load averages (1 min) at the start and the end of the row's runs
	Error                            string  // the run failed: the rest of the row is empty
}

// FeatureRow is the curious aggregator's feature inference on a goal
// row's passive run.
type FeatureRow struct {
	Set, Length, Algo, Privacy, Profile string
	Seed                                uint64
	Attack                              string // feature (ridge, as `asyrevel attack feature`), code-mean (label-free codes)
	Target, Features, Rounds, Outputs   int
	Aux, Samples                        int
	R2, MeanCorr                        float64
	Note                                string
}

// Goal runs the goal rows. A run that fails leaves its row with the error
// (the report lists it) and the experiment goes on.
func Goal(ctx context.Context, cfg GoalConfig) ([]GoalRow, []FeatureRow, error) {
	if cfg.Build == nil {
		return nil, nil, errors.New("experiment: the goal rows need the train command's parser (GoalConfig.Build)")
	}
	if cfg.Attacker == 0 {
		cfg.Attacker = 3
	}
	if cfg.FeatureTarget == 0 {
		cfg.FeatureTarget = 1
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 15 * time.Minute
	}
	cache := map[string]*run.Data{}
	var rows []GoalRow
	var feats []FeatureRow
	for i, g := range cfg.Runs {
		if err := ctx.Err(); err != nil {
			return rows, feats, err
		}
		cfg.Log.Info().Int("row", i+1).Int("of", len(cfg.Runs)).Str("set", g.Set).Str("length", g.Length).Str("algo", g.Algo).
			Str("privacy", g.Privacy).Uint64("seed", g.Seed).Msg("goal")
		r, fr, err := goalRow(ctx, &cfg, g, cache)
		r.LoadEnd = loadAverage()
		if err != nil {
			if ctx.Err() != nil {
				return rows, feats, ctx.Err()
			}
			r.Error = err.Error()
			cfg.Log.Warn().Err(err).Str("set", g.Set).Msg("goal row failed")
		}
		rows, feats = append(rows, r), append(feats, fr...)
		cfg.Log.Info().Str("set", g.Set).Str("length", g.Length).Str("algo", g.Algo).Str("privacy", g.Privacy).Str("profile", r.Profile).
			Str("acc", fmtF(100*r.TestAccuracy, 2)).Str("passive_auc", fmtF(r.Passive.AUC, 3)).Str("active_auc", fmtF(r.Active.AUC, 3)).
			Str("bound", fmtF(r.AUCBound, 3)).Str("wall_s", fmtF(r.WallSeconds, 1)).Str("load", fmtF(r.LoadStart, 2)+"-"+fmtF(r.LoadEnd, 2)).Msg("goal row")
		if cfg.OnRow != nil {
			if err := cfg.OnRow(rows, feats); err != nil {
				return rows, feats, err
			}
		}
	}
	return rows, feats, nil
}

// goalRow runs one goal row: the split (if any), the passive run and its
// attacks, the feature inference, then the active run and its attacks.
func goalRow(ctx context.Context, cfg *GoalConfig, g GoalRun, cache map[string]*run.Data) (GoalRow, []FeatureRow, error) {
	r := GoalRow{GoalRun: g, TestAccuracy: nanF, WallSeconds: nanF, TrainSeconds: nanF, AUCBound: nanF, AUCBoundAll: nanF, Epsilon: nanF,
		Passive: GoalAttack{AUC: nanF, MaxClassAUC: nanF}, Active: GoalAttack{AUC: nanF, MaxClassAUC: nanF}, ActiveAccuracy: nanF,
		Started: time.Now().UTC(), LoadStart: loadAverage()}
	tag := strings.NewReplacer(".", "_", "=", "", ",", "_").Replace(fmt.Sprintf("goal-%s-%s-%s-%s-%d", g.Set, g.Length, g.Algo, g.Privacy, g.Seed))
	train := slices.Clone(g.Train)
	if len(g.Split) > 0 {
		if cfg.Split == nil {
			return r, nil, errors.New("experiment: a goal row with a data split needs GoalConfig.Split")
		}
		dir := filepath.Join(cfg.Store, tag+"-split")
		defer os.RemoveAll(dir)
		if err := cfg.Split(append([]string{"--out", dir}, g.Split...)); err != nil {
			return r, nil, fmt.Errorf("data split: %w", err)
		}
		for i, a := range train {
			if a == GoalSplitDir {
				train[i] = dir
			}
		}
	}
	tc, err := cfg.Build(train)
	if err != nil {
		return r, nil, fmt.Errorf("train %s: %w", strings.Join(train, " "), err)
	}
	data, err := goalData(cache, tc, len(g.Split) > 0)
	if err != nil {
		return r, nil, err
	}
	r.Parties = tc.Parties
	attacker := min(cfg.Attacker, tc.Parties)
	nudger := tc.Parties
	if attacker == tc.Parties {
		nudger = 1
	}
	known := privacy.KnownLabels(data.TrainY, cfg.Aux, g.Seed)

	// The honest run: the row's accuracy, bound and passive attacks.
	s, l, done, err := goalTrain(ctx, cfg, tc, data, tag+"-passive", nil)
	if err != nil {
		return r, nil, err
	}
	defer done()
	r.TestAccuracy, r.WallSeconds, r.TrainSeconds, r.StoppedBy = s.TestAccuracy, s.WallSeconds, s.TrainSeconds, s.StoppedBy
	if s.Privacy != nil {
		r.Profile = s.Privacy.Profile
	}
	if s.LabelFree != nil {
		r.FitEpochs, r.FitBestEpoch, r.FitRows = s.LabelFree.Epochs, s.LabelFree.BestEpoch, s.LabelFree.HeldOutRows
	}
	b := s.Bound()
	r.AUCBound, r.AUCBoundAll, r.Epsilon = b.AUC, b.AUCAll, inf
	if b.Epsilon != nil {
		r.Epsilon = *b.Epsilon
	}
	lt := labelTarget{log: l, summary: s, labels: data.TrainY, classes: data.Classes, attacker: attacker, nudger: nudger, known: known, seed: g.Seed}
	prows, err := labelAttacks(ctx, lt, PrivacyRow{})
	if err != nil {
		return r, nil, fmt.Errorf("passive attacks: %w", err)
	}
	r.Passive = strongest(prows)
	var feats []FeatureRow
	if g.Feature {
		feats = featureRows(ctx, cfg, g, &r, s, l, data)
	}
	done()
	if !cfg.Active {
		return r, feats, nil
	}

	// The same run with party attacker active.
	ac := tc
	if cfg.ActiveLength > 0 && ac.Duration != cfg.ActiveLength {
		ac.Duration = cfg.ActiveLength
		r.ActiveLength = cfg.ActiveLength.String()
	}
	if cfg.ActiveMax > 0 && ac.Duration > cfg.ActiveMax {
		ac.Duration = cfg.ActiveMax
		r.ActiveLength = cfg.ActiveMax.String()
	}
	a := &privacy.Active{Perturb: 0.05}
	adv := map[int]party.Adversary{attacker: a}
	if data.Classes > 2 {
		a.Prefer = map[uint32]bool{}
		for id := range known {
			a.Prefer[id] = true
		}
		if nudger != attacker {
			adv[nudger] = &privacy.Active{Nudge: true, Perturb: 0.05, Prefer: a.Prefer}
		}
	}
	as, al, adone, err := goalTrain(ctx, cfg, ac, data, tag+"-active", adv)
	if err != nil {
		r.Active.Note = "the active run failed: " + err.Error()
		return r, feats, nil
	}
	defer adone()
	r.ActiveAccuracy = as.TestAccuracy
	lt.log, lt.summary, lt.active = al, as, true
	arows, err := labelAttacks(ctx, lt, PrivacyRow{})
	if err != nil {
		r.Active.Note = "the active attacks failed: " + err.Error()
		return r, feats, nil
	}
	r.Active = strongest(arows)
	// The bound is what the run spent: a longer active run's may be
	// larger than the row's (the passive run's), which the report
	// compares the attack with.
	if ab := fmtF(as.Bound().AUC, 4); ab != fmtF(r.AUCBound, 4) {
		r.Active.Note = strings.TrimPrefix(r.Active.Note+"; the active run's own bound is "+ab, "; ")
	}
	return r, feats, nil
}

// goalData loads the data of a run's configuration once per set (a small
// table's split is new every row).
func goalData(cache map[string]*run.Data, tc run.Config, fresh bool) (*run.Data, error) {
	key := fmt.Sprintf("%s|%s|%d|%s|%v", tc.Data, tc.Test, tc.Parties, tc.Scale, tc.Synthetic)
	if d, ok := cache[key]; ok && !fresh {
		return d, nil
	}
	d, err := run.LoadData(&tc, run.RoleAll)
	if err != nil {
		return nil, err
	}
	if !fresh {
		cache[key] = d
	}
	return d, nil
}

// goalTrain trains tc on data over the embedded broker with a store of its
// own, and opens its log; done closes the log and removes the store.
func goalTrain(ctx context.Context, cfg *GoalConfig, tc run.Config, data *run.Data, id string, adv map[int]party.Adversary) (*run.Summary, *replay.Log, func(), error) {
	store := filepath.Join(cfg.Store, id)
	tc.Run, tc.StoreDir, tc.Out = id, store, ""
	tc.Monitor.Report = false
	limit := cfg.Timeout + tc.Duration
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	s, err := run.Train(rctx, tc, run.Hooks{Loaded: data, Adversaries: adv})
	if err != nil {
		os.RemoveAll(store)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, nil, nil, fmt.Errorf("the run did not finish within %v: %w", limit, err)
		}
		return nil, nil, nil, err
	}
	l, err := replay.Open(ctx, replay.Source{Store: store, Run: id})
	if err != nil {
		os.RemoveAll(store)
		return nil, nil, nil, err
	}
	closed := false
	return s, l, func() {
		if !closed {
			closed = true
			l.Close()
			os.RemoveAll(store)
		}
	}, nil
}

// strongest is the label attack of rows with the largest AUC, the
// references (the party's own model, the shuffled replies) aside; a view
// without requests gives its AttackNone row.
func strongest(rows []PrivacyRow) GoalAttack {
	best := GoalAttack{AUC: nanF, MaxClassAUC: nanF}
	var notes []string
	for _, r := range rows {
		if r.Attack == "model" || r.Attack == "shuffled" {
			continue
		}
		if r.Attack == AttackNone && best.Attack == "" {
			best = GoalAttack{Attack: AttackNone, AUC: nanF, MaxClassAUC: nanF, Note: r.Note}
			continue
		}
		if math.IsNaN(r.AUC) {
			if r.Note != "" {
				notes = append(notes, r.Attack+": "+r.Note)
			}
			continue
		}
		if math.IsNaN(best.AUC) || r.AUC > best.AUC {
			best = GoalAttack{Attack: r.Attack, AUC: r.AUC, MaxClassAUC: r.MaxClassAUC, Covered: r.Covered, Positives: r.Positives, Note: r.Note}
		}
	}
	if best.Attack == "" && len(notes) > 0 {
		best.Note = strings.Join(notes, "; ")
	}
	return best
}

// featureRows runs the curious aggregator's feature inference on party
// FeatureTarget of a run's log: the ridge regression of `asyrevel attack
// feature` and, on a label-free run, the code-mean attack.
func featureRows(ctx context.Context, cfg *GoalConfig, g GoalRun, r *GoalRow, s *run.Summary, l *replay.Log, data *run.Data) []FeatureRow {
	m := cfg.FeatureTarget
	base := FeatureRow{Set: g.Set, Length: g.Length, Algo: g.Algo, Privacy: g.Privacy, Profile: r.Profile, Seed: g.Seed, Target: m,
		R2: nanF, MeanCorr: nanF}
	fail := func(attack string, err error) FeatureRow {
		f := base
		f.Attack, f.Note = attack, err.Error()
		return f
	}
	if m > len(data.PartTrain) {
		return []FeatureRow{fail("feature", fmt.Errorf("no party %d in a %d-party run", m, len(data.PartTrain)))}
	}
	v, err := privacy.ReadView(ctx, l, m)
	if err != nil && !errors.Is(err, privacy.ErrNoRequests) {
		return []FeatureRow{fail("feature", err)}
	}
	t, err := privacy.PartyTrajectories(v, m)
	if err != nil {
		return []FeatureRow{fail("feature", err)}
	}
	truth := data.PartTrain[m-1]
	aux := privacy.AuxSamples(t.N, cfg.FeatureAux, g.Seed)
	var out []FeatureRow
	fs, err := privacy.FeatureAttack(t, truth, aux)
	if err != nil {
		out = append(out, fail("feature", err))
	} else {
		f := base
		f.Attack, f.Features, f.Rounds, f.Outputs, f.Aux, f.Samples, f.R2, f.MeanCorr, f.Note =
			"feature", fs.Features, fs.Rounds, fs.Rounds*t.K, fs.Aux, fs.Samples, fs.R2, fs.MeanCorr, fs.Note
		out = append(out, f)
	}
	if s.LabelFree != nil {
		cs, err := CodeMeanAttack(t, truth, aux)
		if err != nil {
			out = append(out, fail("code-mean", err))
		} else {
			cs.Set, cs.Length, cs.Algo, cs.Privacy, cs.Profile, cs.Seed, cs.Target = base.Set, base.Length, base.Algo, base.Privacy, base.Profile, base.Seed, m
			out = append(out, *cs)
		}
	}
	return out
}
