package sim

import (
	"context"
	"math"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/asyrevel/asyrevel/run"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/zoo"
)

// sharedData locates ../shared/data beside the repository.
func sharedData(t testing.TB, rel string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "data", rel)
	if _, err := dataset.Inspect(p); err != nil {
		t.Skipf("real data not available (%v): put the shared data set beside the repository", err)
	}
	return p
}

func TestCentralLogisticA9a(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tr, te, err := dataset.OpenPair(sharedData(t, "a9a/a9a.gz"), sharedData(t, "a9a/a9a.t.gz"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := CentralLogistic(tr, te, model.Nonconvex{}, 1e-4, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("f* = %.6f, train %.4f, test %.4f, %d iterations", r.Objective, r.TrainAccuracy, r.TestAccuracy, r.Iterations)
	// The known figure for logistic regression on a9a is 85.0% test accuracy.
	if r.TestAccuracy < 0.845 || r.TestAccuracy > 0.855 {
		t.Errorf("central test accuracy %.4f, want 0.850 +- 0.005", r.TestAccuracy)
	}
}

func TestReferenceZOMatchesCentral(t *testing.T) {
	// On a small synthetic set the single-process ZO loop must approach the
	// centralised solver's objective-level accuracy.
	cfg := small()
	tr, te, err := dataset.Synthetic(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	central, err := CentralLogistic(tr, te, model.Nonconvex{}, 1e-4, false)
	if err != nil {
		t.Fatal(err)
	}
	tc := run.New(func(c *run.Config) {
		c.Synthetic = cfg
		c.Parties = 4
	})
	data, err := run.LoadData(&tc, run.RoleAll)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ReferenceZO(context.Background(), data, RefConfig{
		Parties: 4, Dist: zoo.Gaussian, Batch: 16, LR: zoo.Schedule{Eta0: 0.03, T0: 200}, Mu: 1e-3,
		Lambda: 1e-4, Reg: model.Nonconvex{}, Seed: 1, MaxSteps: 30000, EvalEvery: 5000,
		NewLocal: func(m, d int) model.Local { return model.NewLinear(d, 1) }, Head: model.NewLogistic(4),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("central %.4f, ZO reference %.4f after %d steps", central.TestAccuracy, r.TestAccuracy, r.Steps)
	if math.Abs(r.TestAccuracy-central.TestAccuracy) > 0.02 {
		t.Errorf("ZO reference %.4f, central %.4f: more than 2 points apart", r.TestAccuracy, central.TestAccuracy)
	}
}
