package aggregator

import (
	"math"
	"testing"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/privacy/dp"
	"github.com/asyrevel/asyrevel/privacy/metric"
)

// The accountant against its own worst case: an active party isolates one
// sample per batch-mean request (c_hat = c for the others, a perturbation
// that saturates the clip on it) and asks about it until the per-label
// budget refuses it, then sums every reply it got (the likelihood-ratio
// test of a Gaussian mechanism). Over many samples, half of each label,
// the AUC of that sum must not be above the bound the accountant reports
// (beyond the Monte Carlo's error), and must reach it (the test has the
// power to see a bound that is too low). A budget that let one more visit
// through, or noise below what is accounted, puts the AUC above the bound.
func TestAccountantWorstCase(t *testing.T) {
	const (
		n      = 40000 // samples: the Monte Carlo's trials
		C      = 0.01
		visits = 10 // the visits of one label the budget allows
	)
	labels := make([]int32, n)
	for i := range n {
		labels[i] = int32(i % 2)
	}
	mu := dp.MuForAUC(0.6)
	budget := mu * mu / 2 // rho of AUC 0.6
	// A visit of a one-sample mean costs (2C)^2 / (2 sigma^2): the noise
	// that makes the budget last visits visits, and a little more.
	sigma := 2 * C / math.Sqrt(2*budget/visits) * 1.0001
	visit := dp.GaussianRho(2*C, sigma)
	a := newDefended(t, 1, labels, model.NewLogistic(1), Defense{Reply: ReplyMean, Clip: C, Noise: sigma, Budget: budget})
	score := make([]float64, n)
	pos := make([]bool, n)
	seq := uint64(0)
	asked := int(budget/visit) + 3 // beyond the budget: the refused replies are exact zeros
	for i := range n {
		pos[i] = labels[i] == 1
		for range asked {
			ids := []uint32{uint32(i)}
			seq++
			o := request(1, seq, ids, 0.5, 0.5)
			o.CHat[0] = 0.5 + 1 // saturates the clip: y=1 gives -C, y=0 +C
			a.answer(1, o)
			score[i] -= a.rep.Delta[0] // larger for y = 1
		}
	}
	acc := a.def.report(len(labels)).Accounting
	got := metric.AUC(score, pos)
	se := metric.AUCStdErr(got, n/2, n/2)
	t.Logf("AUC %.4f (SE %.4f) against the bound %.4f (rho %.4g, budget %.4g, %d visits a label asked)", got, se, acc.AUCBound, acc.MaxRho, budget, asked)
	if got > acc.AUCBound+4*se {
		t.Errorf("the worst-case attack's AUC %.4f is above the accountant's bound %.4f (SE %.4f)", got, acc.AUCBound, se)
	}
	if got < acc.AUCBound-4*se {
		t.Errorf("the worst-case attack's AUC %.4f stays below the bound %.4f (SE %.4f): the test cannot see a bound too low", got, acc.AUCBound, se)
	}
	if acc.AUCBound > 0.6+1e-9 {
		t.Errorf("bound %.4f above the budget's 0.6", acc.AUCBound)
	}
}
