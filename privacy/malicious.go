package privacy

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
)

// FinalTable assembles the outputs every party of the view sent for the
// last evaluation round of split that all of them completed: n x (q*k),
// party m's k outputs at columns (m-1)*k... It is what the aggregator
// scored the run with; q is the number of parties.
func FinalTable(v *View, q int, split schemas.Split) ([]float64, uint32, error) {
	k := v.K
	best := -1
	for round := range 1 << 20 {
		all := true
		for m := 1; m <= q; m++ {
			if completeRound(v.Evals[m], uint32(round), split) == nil {
				all = false
				break
			}
		}
		if all {
			best = round
		}
		if round > 0 && !anyRound(v, q, uint32(round), split) {
			break
		}
	}
	if best < 0 {
		return nil, 0, fmt.Errorf("%w: no evaluation round of the %s split that all %d parties completed", ErrView, split, q)
	}
	first := completeRound(v.Evals[1], uint32(best), split)
	n := len(first.C) / k
	t := make([]float64, n*q*k)
	for m := 1; m <= q; m++ {
		r := completeRound(v.Evals[m], uint32(best), split)
		for i := range n {
			copy(t[i*q*k+(m-1)*k:i*q*k+m*k], r.C[i*k:(i+1)*k])
		}
	}
	return t, uint32(best), nil
}

func completeRound(rs []EvalRound, round uint32, split schemas.Split) *EvalRound {
	for i := len(rs) - 1; i >= 0; i-- {
		r := &rs[i]
		if r.Round == round && r.Split == split {
			for _, c := range r.C {
				if math.IsNaN(c) {
					return nil
				}
			}
			return r
		}
	}
	return nil
}

func anyRound(v *View, q int, round uint32, split schemas.Split) bool {
	for m := 1; m <= q; m++ {
		for _, r := range v.Evals[m] {
			if r.Round >= round && r.Split == split {
				return true
			}
		}
	}
	return false
}

// MaliciousScore is what a malicious party achieved, scored on the final
// evaluation of the test set.
type MaliciousScore struct {
	Attack   string `json:"attack"`
	Attacker int    `json:"attacker"`
	Run      string `json:"run"`
	Round    uint32 `json:"round"`
	// Accuracy is the main-task accuracy on the clean test samples (all of
	// them for inflate; the even ones for a backdoor).
	Accuracy float64 `json:"main_task_accuracy"`
	Samples  int     `json:"samples"`
	// ASR is a backdoor's attack success rate: the fraction of triggered
	// (odd) test samples of another class that the model puts in Target.
	ASR       float64 `json:"attack_success_rate,omitempty"`
	Target    int32   `json:"target,omitempty"`
	Triggered int     `json:"triggered_samples,omitempty"`
	// Dominance is the attacker's mean |output| over the mean |output| of
	// the other parties: how much of the head's input it holds.
	Dominance float64 `json:"dominance"`
}

// ScoreMalicious scores a backdoor (target >= 0) or an inflating party
// (target < 0) from the final test table (FinalTable), the head and its
// final parameters w0, the true test labels and the attacker m. maxOutput,
// if positive, is the aggregator's bound on the outputs (it clips what it
// receives before scoring: so does this).
func ScoreMalicious(table []float64, q, k int, head model.Head, w0 []float64, labels []int32, m int, target int32, maxOutput float64) (*MaliciousScore, error) {
	w := q * k
	if maxOutput > 0 {
		for i, v := range table {
			table[i] = max(-maxOutput, min(maxOutput, v))
		}
	}
	n := len(table) / w
	if n != len(labels) {
		return nil, fmt.Errorf("privacy: %d test samples in the log, %d true labels: wrong --test?", n, len(labels))
	}
	s := &MaliciousScore{Attack: "inflate", Attacker: m, Target: target}
	if target >= 0 {
		s.Attack = "backdoor"
	}
	var own, others float64
	var ok, hit int
	for i, y := range labels {
		c := table[i*w : (i+1)*w]
		for j, v := range c {
			if j/k == m-1 {
				own += math.Abs(v)
			} else {
				others += math.Abs(v)
			}
		}
		pred := head.Predict(w0, c)
		switch {
		case target >= 0 && i%2 == 1:
			if y != target {
				s.Triggered++
				if pred == target {
					hit++
				}
			}
		default:
			s.Samples++
			if pred == y {
				ok++
			}
		}
	}
	if s.Samples > 0 {
		s.Accuracy = float64(ok) / float64(s.Samples)
	}
	if s.Triggered > 0 {
		s.ASR = float64(hit) / float64(s.Triggered)
	}
	if others > 0 {
		s.Dominance = own / (others / float64(q-1))
	}
	return s, nil
}

// PlotMalicious draws a malicious attack's main-task accuracy and attack
// success rate.
func PlotMalicious(path string, s *MaliciousScore) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s by party %d (run %s)", s.Attack, s.Attacker, s.Run)
	vals := plotter.Values{100 * s.Accuracy}
	names := []string{"main-task accuracy"}
	if s.Attack == "backdoor" {
		vals, names = append(vals, 100*s.ASR), append(names, "attack success rate")
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(50))
	if err != nil {
		return err
	}
	bars.Color = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	p.Add(plotter.NewGrid(), bars)
	p.NominalX(names...)
	p.Y.Label.Text = "%"
	p.Y.Min, p.Y.Max = 0, 100
	return p.Save(5*vg.Inch, 4*vg.Inch, path)
}
