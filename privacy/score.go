package privacy

import (
	"context"
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/asyrevel/asyrevel/privacy/metric"
	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/schemas"
)

// LabelScore is a label attack scored against the true labels.
type LabelScore struct {
	Attack   string `json:"attack"`
	Attacker string `json:"attacker"` // e.g. "party 3", "parties 1,2"
	Run      string `json:"run"`
	Format   string `json:"reply_format"`
	Samples  int    `json:"train_samples"`
	Covered  int    `json:"samples_covered"`
	Visits   int    `json:"replies_used"`
	// Accuracy of the predicted labels on the covered samples, and the
	// accuracy of always guessing the majority class there (the floor).
	Accuracy float64 `json:"accuracy"`
	Majority float64 `json:"majority_accuracy"`
	// AUC is the ROC AUC of the scores (binary) or the macro one-vs-rest
	// AUC (multiclass).
	AUC float64 `json:"auc"`
	// ClassAUC (multiclass) is the one-vs-rest AUC of each class (NaN
	// written as null: a class absent from the covered samples), and
	// MaxClassAUC the largest: what a label bound per class must cover.
	ClassAUC    []float64  `json:"-"`
	MaxClassAUC float64    `json:"max_class_auc,omitempty"`
	ClassAUCs   []*float64 `json:"class_auc,omitempty"`
	// OthersR2 and OthersCorr (loss attack) compare the recovered sum of
	// the other parties' outputs with the truth (R squared after an affine
	// fit, which absorbs the intercept, and Pearson's r).
	OthersR2   *float64 `json:"others_r2,omitempty"`
	OthersCorr *float64 `json:"others_correlation,omitempty"`
	Note       string   `json:"note,omitempty"`

	roc plotter.XYs // binary ROC curve, for the plot
}

// ScoreLabels scores inf against the true training labels. others, if not
// nil, is the true sum of the other parties' outputs per sample at its
// last visit (OthersTruth).
func ScoreLabels(inf *LabelInference, v *View, labels []int32, others map[uint32]float64) (*LabelScore, error) {
	s := &LabelScore{Attack: inf.Attack, Attacker: attackerName(v.Parties), Run: v.Run, Format: v.Format,
		Samples: len(labels), Covered: len(inf.IDs), Visits: inf.Visits, Note: inf.Note}
	if len(inf.IDs) == 0 {
		return nil, fmt.Errorf("%w: the attack covered no sample", ErrView)
	}
	truth := make([]int32, len(inf.IDs))
	counts := make([]int, max(inf.Classes, 2))
	for j, id := range inf.IDs {
		if int(id) >= len(labels) {
			return nil, fmt.Errorf("privacy: sample id %d beyond the %d true labels: wrong --truth?", id, len(labels))
		}
		truth[j] = labels[id]
		if int(truth[j]) < len(counts) {
			counts[truth[j]]++
		}
	}
	s.Accuracy = metric.Accuracy(inf.Pred, truth)
	s.Majority = float64(slices.Max(counts)) / float64(len(truth))
	if inf.Classes == 2 {
		pos := make([]bool, len(truth))
		for j, y := range truth {
			pos[j] = y == 1
		}
		s.AUC = metric.AUC(inf.Score, pos)
		s.roc = rocCurve(inf.Score, pos)
	} else {
		s.AUC = metric.MacroAUC(inf.Score, truth, inf.Classes)
		s.ClassAUC = metric.ClassAUCs(inf.Score, truth, inf.Classes)
		s.MaxClassAUC = math.NaN()
		for _, a := range s.ClassAUC {
			if math.IsNaN(a) {
				s.ClassAUCs = append(s.ClassAUCs, nil)
				continue
			}
			s.ClassAUCs = append(s.ClassAUCs, &a)
			if math.IsNaN(s.MaxClassAUC) || a > s.MaxClassAUC {
				s.MaxClassAUC = a
			}
		}
		if math.IsNaN(s.MaxClassAUC) {
			s.MaxClassAUC = 0
		}
	}
	if inf.Others != nil && others != nil {
		var x, y []float64
		for j, id := range inf.IDs {
			if t, ok := others[id]; ok && !math.IsNaN(inf.Others[j]) {
				x, y = append(x, inf.Others[j]), append(y, t)
			}
		}
		if len(x) > 2 {
			r := metric.Pearson(x, y)
			r2 := r * r
			s.OthersCorr, s.OthersR2 = &r, &r2
		}
	}
	return s, nil
}

func attackerName(parties []int) string {
	if len(parties) == 1 {
		return "party " + strconv.Itoa(parties[0])
	}
	var b []string
	for _, m := range parties {
		b = append(b, strconv.Itoa(m))
	}
	return "parties " + strings.Join(b, ",")
}

// rocCurve is the ROC curve of scores (at most ~200 points).
func rocCurve(score []float64, pos []bool) plotter.XYs {
	idx := make([]int, len(score))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case score[a] > score[b]:
			return -1
		case score[a] < score[b]:
			return 1
		}
		return 0
	})
	var np, nn float64
	for _, p := range pos {
		if p {
			np++
		} else {
			nn++
		}
	}
	if np == 0 || nn == 0 {
		return nil
	}
	xy := plotter.XYs{{X: 0, Y: 0}}
	step := max(1, len(idx)/200)
	var tp, fp float64
	for k, i := range idx {
		if pos[i] {
			tp++
		} else {
			fp++
		}
		if k%step == 0 || k == len(idx)-1 {
			xy = append(xy, plotter.XY{X: fp / nn, Y: tp / np})
		}
	}
	return xy
}

// OthersTruth replays the whole log (the aggregator's table, in the order
// the aggregator consumed the outputs) and returns, for every sample that
// party m asked about, the sum of the other parties' stored outputs at its
// last visit. It is ground truth: only scorers call it.
func OthersTruth(ctx context.Context, l *replay.Log, m int) (map[uint32]float64, error) {
	var q, n int
	var table []float64 // n x q, k = 1
	out := map[uint32]float64{}
	err := l.Each(ctx, replay.ReadOptions{Kinds: []schemas.Kind{schemas.KindHello, schemas.KindOutput, schemas.KindEval}}, func(r *replay.Record) error {
		if r.Err != nil {
			return nil
		}
		switch msg := r.Msg.(type) {
		case *schemas.Hello:
			q = max(q, r.Party)
			n = int(msg.NTrain)
		case *schemas.EvalOutput:
			if msg.Split != schemas.SplitInit {
				return nil
			}
			if table == nil || len(table) < n*q {
				table = slices.Grow(table[:0], n*q)[:n*q]
			}
			for j, c := range msg.C {
				if i := int(msg.First) + j; i < n && r.Party <= q {
					table[i*q+r.Party-1] = c
				}
			}
		case *schemas.PartyOutput:
			if table == nil || r.Party > q {
				return nil
			}
			for j, id := range msg.IDs {
				if int(id) >= n || j >= len(msg.C) {
					continue
				}
				row := table[int(id)*q : int(id)*q+q]
				row[r.Party-1] = msg.C[j]
				if r.Party == m {
					var s float64
					for p, c := range row {
						if p != m-1 {
							s += c
						}
					}
					out[id] = s
				}
			}
		}
		return nil
	})
	if q == 0 {
		return nil, fmt.Errorf("%w: no hellos in the log", ErrView)
	}
	return out, err
}

// WriteJSON writes v as indented JSON to dir/name.
func WriteJSON(dir, name string, v any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644)
}

// PlotLabels draws the ROC curve of a binary label attack (or the accuracy
// for a multiclass one) into path.
func PlotLabels(path string, s *LabelScore) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s attack by %s (run %s, %s replies)", s.Attack, s.Attacker, s.Run, s.Format)
	p.Add(plotter.NewGrid())
	if s.roc != nil {
		p.X.Label.Text = "false positive rate"
		p.Y.Label.Text = "true positive rate"
		diag, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}})
		diag.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		diag.Color = color.Gray{Y: 150}
		line, err := plotter.NewLine(s.roc)
		if err != nil {
			return err
		}
		line.Color = color.RGBA{R: 214, G: 39, B: 40, A: 255}
		line.Width = vg.Points(1.5)
		p.Add(diag, line)
		p.Legend.Add(fmt.Sprintf("AUC %.3f, accuracy %.1f%% on %d samples", s.AUC, 100*s.Accuracy, s.Covered), line)
		p.Legend.Add("chance", diag)
		p.Legend.Top, p.Legend.Left = false, false
		p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
	} else {
		bars, err := plotter.NewBarChart(plotter.Values{100 * s.Accuracy, 100 * s.Majority, 100 * s.AUC}, vg.Points(40))
		if err != nil {
			return err
		}
		bars.Color = color.RGBA{R: 31, G: 119, B: 180, A: 255}
		p.Add(bars)
		p.NominalX("accuracy", "majority class", "macro AUC")
		p.Y.Label.Text = "%"
		p.Y.Min, p.Y.Max = 0, 100
	}
	return p.Save(6*vg.Inch, 5*vg.Inch, path)
}
