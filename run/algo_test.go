package run

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/model"
)

// Every algorithm trains through the pipeline (over the embedded JetStream
// broker, or the memory bus where the transport is not the point), and the
// stream holds what the summary counts.
func TestAlgorithmsTrain(t *testing.T) {
	if testing.Short() {
		t.Skip("short: a whole run for each algorithm and bus")
	}
	for _, tc := range []struct {
		algo, bus string
		parties   int
		check     func(t *testing.T, s *Summary)
	}{
		{"synrevel-gau", "jetstream", 4, func(t *testing.T, s *Summary) {
			if s.MaxStaleness != 0 || s.Window != 1 {
				t.Errorf("SynREVEL: max staleness %d, window %d; want 0 and 1", s.MaxStaleness, s.Window)
			}
			if s.Steps%4 != 0 {
				t.Errorf("SynREVEL answers whole rounds: %d steps for 4 parties", s.Steps)
			}
		}},
		{"synrevel-uni", "memory", 3, nil},
		{"tig", "jetstream", 4, nil},
		{"nonf", "memory", 0, func(t *testing.T, s *Summary) {
			if s.Parties != 1 {
				t.Errorf("nonf with %d parties", s.Parties)
			}
		}},
	} {
		t.Run(tc.algo, func(t *testing.T) {
			s, err := Train(context.Background(), New(func(c *Config) {
				c.Synthetic = small()
				c.Parties = tc.parties
				c.Algo = tc.algo
				c.Batch = 16
				c.Bus = tc.bus
				c.Epochs = 10
				c.Seed = 5
				c.EvalEvery = 200 * time.Millisecond
			}), Hooks{Log: testLog(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: accuracy %.4f, %d steps in %.2fs, max staleness %d", tc.algo, s.TestAccuracy, s.Steps, s.TrainSeconds, s.MaxStaleness)
			if s.Algo != tc.algo || s.TestAccuracy < 0.90 {
				t.Errorf("%s: test accuracy %.4f, want at least 0.90", s.Algo, s.TestAccuracy)
			}
			if len(s.Rejected) != 0 {
				t.Errorf("rejections in a clean run: %v", s.Rejected)
			}
			checkCounts(t, s)
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

func TestAlgorithmConfigErrors(t *testing.T) {
	for name, c := range map[string]Config{
		"tig with an external model": New(func(c *Config) {
			c.Algo = "tig"
			c.Model = "external"
			c.ModelCmd = "cat"
		}),
		"nonf with 4 parties": New(func(c *Config) {
			c.Algo = "nonf"
			c.Parties = 4
		}),
		"synrevel with window 4": New(func(c *Config) {
			c.Algo = "synrevel-gau"
			c.Window = 4
		}),
		"straggler 9 of 8": New(func(c *Config) {
			c.Straggler = 9
			c.StragglerFactor = 1.6
		}),
		"straggler factor 0.5": New(func(c *Config) {
			c.Straggler = 1
			c.StragglerFactor = 0.5
		}),
		"unknown": New(func(c *Config) {
			c.Algo = "sgd"
		}),
	} {
		c.Synthetic, c.Epochs = small(), 1
		_, err := Train(context.Background(), c, Hooks{Log: testLog(t)})
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
		if name == "tig with an external model" && !errors.Is(err, model.ErrNoGradient) {
			t.Errorf("%s: %v does not say the model has no gradient", name, err)
		}
	}
	for _, s := range []string{"1", "0:2", "a:1.5", "2:0.9", "2:x"} {
		if _, _, err := ParseStraggler(s); !errors.Is(err, ErrConfig) {
			t.Errorf("--straggler %q: %v", s, err)
		}
	}
	if m, f, err := ParseStraggler("3:1.6"); m != 3 || f != 1.6 || err != nil {
		t.Errorf("--straggler 3:1.6: %d %g %v", m, f, err)
	}
}

// With simulated compute and a straggler, SynREVEL's rounds last as long as
// the straggler's steps, and the objective callback reports the parties'
// regularisation term with every evaluation.
func TestStragglerAndObjective(t *testing.T) {
	var mu sync.Mutex
	var pts []aggregator.Point
	var regs []float64
	cfg := New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 3
		c.Algo = "synrevel-gau"
		c.Batch = 16
		c.Bus = "memory"
		c.MaxSteps = 3 * 100
		c.Seed = 5
		c.EvalEvery = 50 * time.Millisecond
		c.SimCompute = 10 * time.Microsecond
		c.Straggler = 2
		c.StragglerFactor = 3 // 8 parameters: 80 us a step, 240 us the straggler's
	})
	s, err := Train(context.Background(), cfg, Hooks{Log: testLog(t), OnObjective: func(pt aggregator.Point, reg float64) {
		mu.Lock()
		defer mu.Unlock()
		pts, regs = append(pts, pt), append(regs, reg)
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rounds in %.3fs: %.0f us a round", s.Steps/3, s.TrainSeconds, 1e6*s.TrainSeconds/float64(s.Steps/3))
	if s.Straggler != "2:3" || s.SimCompute != 10 {
		t.Errorf("summary straggler %q, sim compute %g", s.Straggler, s.SimCompute)
	}
	if perRound := s.TrainSeconds / float64(s.Steps/3); perRound < 240e-6 {
		t.Errorf("%.0f us a round, want at least the straggler's 240 us", 1e6*perRound)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(pts) == 0 || !pts[len(pts)-1].Final {
		t.Fatalf("%d objective points, the last not final", len(pts))
	}
	for i, r := range regs {
		if r < 0 || math.IsNaN(r) || (i > 0 && r == 0) {
			t.Fatalf("regularisation term %v at point %d", r, i)
		}
	}
}

// TestNonFNetworkStep: the nonf network's default step is the federated
// one over NonFWidth (at the federated step it diverged on MNIST); the
// linear model's and an explicit --lr are left alone.
func TestNonFNetworkStep(t *testing.T) {
	tests := []struct {
		algo, model string
		lr, want    float64
	}{
		{"nonf", "mlp", 0, DefaultLR("mlp", MLPBatch) / NonFWidth},
		{"asyrevel-gau", "mlp", 0, DefaultLR("mlp", MLPBatch)},
		{"nonf", "linear", 0, DefaultLR("linear", 64)},
		{"nonf", "mlp", 0.002, 0.002},
	}
	for _, tc := range tests {
		c := New(func(c *Config) {
			c.Algo = tc.algo
			c.Model = tc.model
			c.LR = tc.lr
			c.Data = "x.csv"
		})
		if err := c.Prepare(); err != nil {
			t.Fatalf("%s %s: %v", tc.algo, tc.model, err)
		}
		if c.LR != tc.want {
			t.Errorf("%s %s --lr %g: step %g, want %g", tc.algo, tc.model, tc.lr, c.LR, tc.want)
		}
	}
}
