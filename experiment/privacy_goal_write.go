package experiment

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/privacy"
	"github.com/asyrevel/asyrevel/privacy/metric"
	"github.com/asyrevel/asyrevel/run"
)

// The goal rows' files in a results folder.
const (
	GoalFile        = "privacy-goal.csv"
	GoalFeatureFile = "privacy-goal-feature.csv"
)

// goalKeyCols are the columns that identify a row of GoalFile (and, with
// the attack and its target, of GoalFeatureFile).
var goalKeyCols = []string{"set", "length", "algo", "privacy", "seed"}

var goalHeader = append(slices.Clone(goalKeyCols), "profile", "parties", "test_accuracy", "wall_seconds", "train_seconds", "stopped_by",
	"fit_epochs", "fit_best_epoch", "fit_held_out_rows", "auc_bound", "auc_bound_all", "epsilon",
	"passive_attack", "passive_auc", "passive_max_class_auc", "passive_covered", "passive_note",
	"active_attack", "active_auc", "active_max_class_auc", "active_covered", "active_note", "active_length", "active_test_accuracy",
	"started_utc", "load_start", "load_end", "command", "error",
	// Since the report's Hanley-McNeil intervals: the covered samples of
	// the class of *_max_class_auc (binary: label 1), the rest of
	// *_covered its negatives. Older files lack them (mergeCSV pads).
	"passive_class_positives", "active_class_positives")

var goalFeatureHeader = append(slices.Clone(goalKeyCols), "attack", "target", "profile", "features", "rounds", "outputs_per_sample",
	"aux", "samples", "r2", "mean_correlation", "note")

// numText formats v with prec decimals; "" for NaN, "inf" for +Inf.
func numText(v float64, prec int) string {
	switch {
	case math.IsNaN(v):
		return ""
	case math.IsInf(v, 1):
		return "inf"
	}
	return fmtF(v, prec)
}

func (r GoalRow) record() []string {
	itoa := strconv.Itoa
	started := ""
	if !r.Started.IsZero() {
		started = r.Started.UTC().Format(time.RFC3339)
	}
	return []string{r.Set, r.Length, r.Algo, r.Privacy, strconv.FormatUint(r.Seed, 10), r.Profile, itoa(r.Parties),
		numText(r.TestAccuracy, 4), numText(r.WallSeconds, 1), numText(r.TrainSeconds, 1), r.StoppedBy,
		itoa(r.FitEpochs), itoa(r.FitBestEpoch), itoa(r.FitRows), numText(r.AUCBound, 4), numText(r.AUCBoundAll, 4), numText(r.Epsilon, 3),
		r.Passive.Attack, numText(r.Passive.AUC, 4), numText(r.Passive.MaxClassAUC, 4), itoa(r.Passive.Covered), r.Passive.Note,
		r.Active.Attack, numText(r.Active.AUC, 4), numText(r.Active.MaxClassAUC, 4), itoa(r.Active.Covered), r.Active.Note, r.ActiveLength,
		numText(r.ActiveAccuracy, 4), started, numText(r.LoadStart, 2), numText(r.LoadEnd, 2), r.Command(), r.Error,
		positivesText(r.Passive), positivesText(r.Active)}
}

// positivesText is a's positives, "" when unknown (no attack scored, or
// an AUC read from privacy.json without its counts).
func positivesText(a GoalAttack) string { return positives(a.Positives, a.Covered) }

func (f FeatureRow) record() []string {
	itoa := strconv.Itoa
	return []string{f.Set, f.Length, f.Algo, f.Privacy, strconv.FormatUint(f.Seed, 10), f.Attack, itoa(f.Target), f.Profile,
		itoa(f.Features), itoa(f.Rounds), itoa(f.Outputs), itoa(f.Aux), itoa(f.Samples), numText(f.R2, 4), numText(f.MeanCorr, 4), f.Note}
}

// WriteGoal puts rows into dir's privacy-goal.csv and feats into
// privacy-goal-feature.csv (a row of the same set, length, algorithm,
// privacy and seed, and for a feature row the same attack and target,
// replaces the earlier one in place; others are kept), records the
// command among the section's earlier ones, and writes the report again.
func WriteGoal(dir string, rows []GoalRow, feats []FeatureRow, cmdline string, started time.Time) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var recs, frecs [][]string
	for _, r := range rows {
		recs = append(recs, r.record())
	}
	for _, f := range feats {
		frecs = append(frecs, f.record())
	}
	if err := mergeCSV(filepath.Join(dir, GoalFile), goalHeader, len(goalKeyCols), recs); err != nil {
		return err
	}
	if len(frecs) > 0 {
		if err := mergeCSV(filepath.Join(dir, GoalFeatureFile), goalFeatureHeader, len(goalKeyCols)+2, frecs); err != nil {
			return err
		}
	}
	cmds := sectionRun(dir, "privacy-goal").Commands
	if cmdline != "" && !slices.Contains(cmds, cmdline) {
		cmds = append(cmds, cmdline)
	}
	return WriteSection(dir, Section{Name: "privacy-goal", Command: strings.Join(cmds, "\n"), Started: started,
		Settings: []string{"the commands above ran one after the other, each adding its rows; the start, length and load said here are the last one's, " +
			"and each row's load average at its start and end is in privacy-goal.csv (load_start, load_end)"}})
}

// mergeCSV writes path with header and the records of the file there
// (same header) with fresh's in place of those of the same key (the first
// keyCols columns); fresh's new keys go at the end.
func mergeCSV(path string, header []string, keyCols int, fresh [][]string) error {
	old, err := readGoalCSV(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if len(old) > 0 && !slices.Equal(old[0], header) {
		// A file written before columns were added at the end: its rows
		// get them empty (unknown).
		if len(old[0]) >= len(header) || !slices.Equal(old[0], header[:len(old[0])]) {
			return fmt.Errorf("%s: not a file of this version (its columns differ): move it away to start it again", path)
		}
		for i, r := range old[1:] {
			old[i+1] = append(r, make([]string, len(header)-len(r))...)
		}
	}
	key := func(r []string) string { return strings.Join(r[:keyCols], "\x00") }
	byKey := map[string][]string{}
	for _, r := range fresh {
		byKey[key(r)] = r
	}
	var out [][]string
	placed := map[string]bool{}
	if len(old) > 0 {
		for _, r := range old[1:] {
			k := key(r)
			if f, ok := byKey[k]; ok {
				r = f
				placed[k] = true
			}
			out = append(out, r)
		}
	}
	for _, r := range fresh {
		if k := key(r); !placed[k] {
			placed[k] = true
			out = append(out, r)
		}
	}
	return run.WriteCSV(path, header, out)
}

func readGoalCSV(path string) ([][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return recs, nil
}

// CodeMeanAttack is the curious aggregator's feature inference on a
// label-free run's codes: output k of a party codes the columns of block
// k (dataset.Blocks of its columns into its outputs) by a centroid's
// index, so the aggregator, knowing the features of the aux samples,
// predicts every other sample's block by the mean of the aux samples of
// the same code (the aux mean for a code no aux sample has). Scored as
// privacy.FeatureAttack is: R squared pooled over the features and the
// mean correlation, on the samples outside aux.
func CodeMeanAttack(t *privacy.Trajectories, truth *dataset.Matrix, aux []int) (*FeatureRow, error) {
	if truth.NRows != t.N {
		return nil, fmt.Errorf("experiment: truth has %d rows, the party sent %d", truth.NRows, t.N)
	}
	if len(aux) < 2 {
		return nil, fmt.Errorf("%w: the code-mean attack needs auxiliary samples", privacy.ErrView)
	}
	d, k := truth.NCols, t.K
	blocks, err := dataset.Blocks(d, k)
	if err != nil {
		return nil, fmt.Errorf("%w: %d outputs over %d features: %w", privacy.ErrView, k, d, err)
	}
	w := t.Rounds * k
	code := func(i, j int) (int, bool) {
		v := t.X[i*w+j] // the first round's output j
		if v < 0 || v != math.Trunc(v) || v > 1<<20 {
			return 0, false
		}
		return int(v), true
	}
	dense := func(i int, dst []float64) {
		clear(dst)
		idx, val := truth.Row(i)
		for j, c := range idx {
			dst[c] = float64(val[j])
		}
	}
	sums := make([]map[int][]float64, k)
	counts := make([]map[int]float64, k)
	for j := range k {
		sums[j], counts[j] = map[int][]float64{}, map[int]float64{}
	}
	mean := make([]float64, d)
	x := make([]float64, d)
	isAux := make([]bool, t.N)
	for _, i := range aux {
		isAux[i] = true
		dense(i, x)
		for c := range d {
			mean[c] += x[c] / float64(len(aux))
		}
		for j, b := range blocks {
			c, ok := code(i, j)
			if !ok {
				return nil, fmt.Errorf("%w: output %d of sample %d is %g, not a code", privacy.ErrView, j, i, t.X[i*w+j])
			}
			s := sums[j][c]
			if s == nil {
				s = make([]float64, b.Len())
				sums[j][c] = s
			}
			for c2 := b.Lo; c2 < b.Hi; c2++ {
				s[c2-b.Lo] += x[c2]
			}
			counts[j][c]++
		}
	}
	pred := make([][]float64, d)
	tru := make([][]float64, d)
	row := &FeatureRow{Attack: "code-mean", Features: d, Rounds: t.Rounds, Outputs: w, Aux: len(aux)}
	p := make([]float64, d)
	for i := range t.N {
		if isAux[i] {
			continue
		}
		copy(p, mean)
		for j, b := range blocks {
			c, ok := code(i, j)
			if !ok {
				return nil, fmt.Errorf("%w: output %d of sample %d is %g, not a code", privacy.ErrView, j, i, t.X[i*w+j])
			}
			if n := counts[j][c]; n > 0 {
				for c2 := b.Lo; c2 < b.Hi; c2++ {
					p[c2] = sums[j][c][c2-b.Lo] / n
				}
			}
		}
		dense(i, x)
		for c := range d {
			pred[c] = append(pred[c], p[c])
			tru[c] = append(tru[c], x[c])
		}
		row.Samples++
	}
	var res, tot, corr float64
	nc := 0
	for c := range d {
		var m float64
		for _, v := range tru[c] {
			m += v
		}
		m /= float64(len(tru[c]))
		for i, v := range tru[c] {
			res += (v - pred[c][i]) * (v - pred[c][i])
			tot += (v - m) * (v - m)
		}
		if r := metric.Pearson(pred[c], tru[c]); !math.IsNaN(r) {
			corr += r
			nc++
		}
	}
	row.R2, row.MeanCorr = 1-res/tot, nanF
	if nc > 0 {
		row.MeanCorr = corr / float64(nc)
	}
	row.Note = fmt.Sprintf("each of the %d outputs is the code of %d to %d columns: the features predicted by the aux samples' mean of the same code", k, blocks[k-1].Len(), blocks[0].Len())
	return row, nil
}
