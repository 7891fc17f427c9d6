package run

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestParsePrivacy(t *testing.T) {
	for _, c := range []struct {
		in   string
		want PrivacySpec
	}{
		{"off", PrivacySpec{}},
		{"none", PrivacySpec{}},
		{"auc=0.6", PrivacySpec{Mode: PrivacyAUC, AUC: 0.6}},
		{" AUC=0.75 ", PrivacySpec{Mode: PrivacyAUC, AUC: 0.75}},
		{"epsilon=2", PrivacySpec{Mode: PrivacyEpsilon, Epsilon: 2}},
		{"eps=1,delta=1e-6", PrivacySpec{Mode: PrivacyEpsilon, Epsilon: 1, Delta: 1e-6}},
		{"auc=0.6,profile=budget", PrivacySpec{Mode: PrivacyAUC, AUC: 0.6, Profile: "budget"}},
		{"epsilon=2,delta=1e-6,profile=label-free", PrivacySpec{Mode: PrivacyEpsilon, Epsilon: 2, Delta: 1e-6, Profile: "label-free"}},
	} {
		got, err := ParsePrivacy(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParsePrivacy(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if back, err := ParsePrivacy(got.String()); err != nil || back != got {
			t.Errorf("%q: String %q reads back as %+v, %v", c.in, got.String(), back, err)
		}
	}
	for _, bad := range []string{"", "on", "auc", "auc=0.5", "auc=1", "auc=0.4", "auc=x", "auc=NaN", "epsilon=0", "epsilon=-1",
		"epsilon=inf", "delta=1e-5", "epsilon=1,delta=1", "epsilon=1,delta=0", "auc=0.6,delta=1e-5", "epsilon=1,delta=1e-5,x=1", "auc=0.6,auc=0.7",
		"profile=budget", "auc=0.6,profile=other", "epsilon=1,delta=1e-5,delta=1e-6"} {
		if _, err := ParsePrivacy(bad); !errors.Is(err, ErrPrivacy) {
			t.Errorf("ParsePrivacy(%q): %v, want ErrPrivacy", bad, err)
		}
	}
}

func chose(c *PrivacyChoice, flag string) (string, bool) {
	i := slices.IndexFunc(c.Chose, func(s Setting) bool { return s.Flag == flag })
	if i < 0 {
		return "", false
	}
	return c.Chose[i].Value, true
}

func TestApplyPrivacy(t *testing.T) {
	prep := func(t *testing.T, c Config) *Config {
		t.Helper()
		c.Data = "x"
		if err := c.Prepare(); err != nil {
			t.Fatal(err)
		}
		return &c
	}
	t.Run("default binary", func(t *testing.T) {
		c := prep(t, New(func(c *Config) {
			c.Privacy = DefaultPrivacy + ",profile=budget"
			c.PrivacyDefault = true
			c.Duration = 20e9
		}))
		if err := c.applyPrivacy(2, 1000); err != nil {
			t.Fatal(err)
		}
		ch := c.PrivacyChoice
		if ch.Profile != "binary" || !ch.Default || c.Defense.Reply != "mean" || c.Batch != BinaryPrivacyBatch ||
			c.Defense.MinBatch != c.Batch || !c.NoBias || c.Defense.DPAUC != 0.6 || c.Defense.NoiseMultiplier <= 0 || c.Defense.MaxPerturb != c.Mu {
			t.Fatalf("config %+v, defense %+v, choice %+v", c, c.Defense, ch)
		}
		if ch.BudgetEpochs != PrivacyBudgetEpochs || !strings.Contains(ch.String(), "--noise-multiplier") {
			t.Errorf("choice %s", ch)
		}
		def, err := c.aggregatorDefense(true)
		if err != nil || def.Budget <= 0 || def.Noise <= 0 {
			t.Errorf("aggregator defense %+v, %v", def, err)
		}
		if _, err := c.aggregatorDefense(false); err == nil {
			t.Error("the perturbation bound calibrated noise for a head that is not logistic")
		}
	})
	t.Run("overrides", func(t *testing.T) {
		c := prep(t, New(func(c *Config) {
			c.Privacy = "auc=0.7,profile=budget"
			c.Batch = 64
			c.Epochs = 4
			c.Explicit = map[string]bool{"batch": true, "dp-epsilon": true}
		}))
		c.Defense.DPEpsilon = 3
		if err := c.applyPrivacy(2, 1000); err != nil {
			t.Fatal(err)
		}
		ch := c.PrivacyChoice
		if c.Batch != 64 || c.Defense.MinBatch != 64 || c.Defense.DPAUC != 0 || c.Defense.DPEpsilon != 3 {
			t.Fatalf("overrides not kept: batch %d, defense %+v", c.Batch, c.Defense)
		}
		if !slices.Contains(ch.Overrides, Setting{"batch", "64"}) || !slices.Contains(ch.Overrides, Setting{"dp-epsilon", "3"}) {
			t.Errorf("overrides %+v", ch.Overrides)
		}
		if lr, _ := chose(ch, "lr"); lr != "0.25" {
			t.Errorf("lr for batch 64: %q", lr)
		}
		// The noise is fitted to the run's 4 epochs under epsilon 3.
		if ch.BudgetEpochs != 4 {
			t.Errorf("budget epochs %g", ch.BudgetEpochs)
		}
	})
	t.Run("epsilon", func(t *testing.T) {
		c := prep(t, New(func(c *Config) {
			c.Privacy = "epsilon=1,delta=1e-6,profile=budget"
			c.Epochs = 8
		}))
		if err := c.applyPrivacy(2, 1000); err != nil {
			t.Fatal(err)
		}
		z1 := c.Defense.NoiseMultiplier
		if c.Defense.DPEpsilon != 1 || c.Defense.DPDelta != 1e-6 || c.Defense.DPAUC != 0 {
			t.Fatalf("defense %+v", c.Defense)
		}
		c2 := prep(t, New(func(c *Config) {
			c.Privacy = "epsilon=4,profile=budget"
			c.Epochs = 8
		}))
		if err := c2.applyPrivacy(2, 1000); err != nil {
			t.Fatal(err)
		}
		if z2 := c2.Defense.NoiseMultiplier; z2 >= z1 {
			t.Errorf("epsilon 4 noise %g, not below epsilon 1's %g", z2, z1)
		}
	})
	t.Run("off", func(t *testing.T) {
		c := prep(t, New(func(c *Config) {
			c.Privacy = "off"
		}))
		before := *c
		if err := c.applyPrivacy(2, 1000); err != nil {
			t.Fatal(err)
		}
		if c.Defense != before.Defense || c.Batch != before.Batch || c.NoBias || c.PrivacyChoice.Profile != "off" {
			t.Errorf("off changed the run: %+v", c.Defense)
		}
	})
	t.Run("tig", func(t *testing.T) {
		c := prep(t, New(func(c *Config) {
			c.Privacy = DefaultPrivacy
			c.PrivacyDefault = true
			c.Algo = "tig"
		}))
		if err := c.applyPrivacy(2, 1000); err != nil || c.PrivacyChoice.Switch != "off" || c.Defense.Reply != "" {
			t.Errorf("default on tig: %v, %+v", err, c.PrivacyChoice)
		}
		c = prep(t, New(func(c *Config) {
			c.Privacy = "auc=0.6"
			c.Algo = "tig"
		}))
		if err := c.applyPrivacy(2, 1000); !errors.Is(err, ErrPrivacy) {
			t.Errorf("explicit on tig: %v", err)
		}
	})
	t.Run("multiclass", func(t *testing.T) {
		// The default (no switch given) is the explicit auc=0.6: the
		// bounded profile, not batch means alone.
		def := prep(t, New(func(c *Config) {
			c.Privacy = DefaultPrivacy + ",profile=budget"
			c.PrivacyDefault = true
			c.Duration = 60e9
			c.Model = "mlp"
			c.Parties = 8
		}))
		if err := def.applyPrivacy(10, 1000); err != nil {
			t.Fatal(err)
		}
		c := prep(t, New(func(c *Config) {
			c.Privacy = "auc=0.6,profile=budget"
			c.Duration = 60e9
			c.Model = "mlp"
			c.Parties = 8
		}))
		if err := c.applyPrivacy(10, 1000); err != nil {
			t.Fatal(err)
		}
		if def.Defense != c.Defense || def.Batch != c.Batch || def.LR != c.LR || def.HeadLR != c.HeadLR ||
			!def.PrivacyChoice.Default || def.PrivacyChoice.Target != c.PrivacyChoice.Target || strings.HasPrefix(def.PrivacyChoice.Target, "none") {
			t.Errorf("default multiclass %+v (%s), explicit auc=0.6 %+v (%s)", def.Defense, def.PrivacyChoice, c.Defense, c.PrivacyChoice)
		}
		d := c.Defense
		if d.DPAUC != 0.6 || d.Clip != MulticlassPrivacyClip*c.Mu || d.HeadClip != MulticlassHeadClip || c.Batch != MulticlassPrivacyBatch || d.MinBatch != c.Batch {
			t.Errorf("explicit multiclass: %+v", d)
		}
		// The head's label part is released R times an epoch, its noise
		// making the R releases cost 1/s^2 of a reply visit: 1 + R (sqrt(2)
		// G / 2C)^2 / HN^2 = 1 + 1/s^2 reply visits per epoch, 10 times
		// that over the 8 epochs' budget.
		if d.HeadRefresh != MulticlassHeadRefresh {
			t.Errorf("head refresh %d, want %d", d.HeadRefresh, MulticlassHeadRefresh)
		}
		per := 1 + 1/(MulticlassHeadNoiseScale*MulticlassHeadNoiseScale)
		ratio := math.Sqrt2 * d.HeadClip / (2 * d.Clip) / d.HeadNoise
		if got := 1 + float64(d.HeadRefresh)*ratio*ratio; math.Abs(got-per) > 0.01 {
			t.Errorf("head cost %g reply visits an epoch, want %g", got, per)
		}
		if z := math.Sqrt(10 * per / (2 * PrivacySpec{Mode: PrivacyAUC, AUC: 0.6}.rho())); math.Abs(d.NoiseMultiplier-z) > 0.05 {
			t.Errorf("noise multiplier %g, want %g", d.NoiseMultiplier, z)
		}
		if c.HeadLR != MulticlassHeadLR || c.LR != MulticlassPrivacyLR || !d.DrawBatches {
			t.Errorf("step sizes %g, head %g", c.LR, c.HeadLR)
		}
		if v, ok := chose(c.PrivacyChoice, "head-clip"); !ok || v != "2" {
			t.Errorf("choice %s", c.PrivacyChoice)
		}
	})
	t.Run("label-free", func(t *testing.T) {
		for _, tc := range []struct {
			name, model string
			explicit    bool
			classes, n  int
			codes       int
			hidden      int
		}{
			{"binary default", "linear", false, 2, 32561, 128, 128},
			{"mlp given", "mlp", true, 10, 60000, 173, 128},
			{"many rows", "linear", false, 2, 1 << 20, LabelFreeMaxCodes, 128},
			{"small table", "linear", false, 3, 142, 8, 0},
		} {
			c := prep(t, New(func(c *Config) {
				c.Privacy = DefaultPrivacy
				c.PrivacyDefault = true
				c.Model = tc.model
				c.Explicit = map[string]bool{"model": tc.explicit}
			}))
			if err := c.applyPrivacy(tc.classes, tc.n); err != nil {
				t.Fatal(err)
			}
			ch := c.PrivacyChoice
			if ch.Profile != "label-free" || !c.LabelFree || c.Model != "codebook" || c.Codes != tc.codes || c.EmbedHidden != tc.hidden {
				t.Errorf("%s: profile %q, label-free %v, model %q, codes %d, hidden %d (want %d, %d)", tc.name, ch.Profile, c.LabelFree, c.Model, c.Codes, c.EmbedHidden, tc.codes, tc.hidden)
			}
			if def, err := c.aggregatorDefense(false); err != nil || def.Noise != 0 || def.Budget != 0 {
				t.Errorf("%s: the label-free profile noises replies: %+v, %v", tc.name, def, err)
			}
			if tc.explicit && !strings.Contains(ch.String(), "--model mlp") {
				t.Errorf("%s: the choice does not say what became of --model mlp: %s", tc.name, ch)
			}
		}
		// A black box of the user's cannot be coded without labels by
		// asyrevel: the budget profile serves it; profile=budget forces it.
		for _, tc := range []struct{ privacy, model string }{{DefaultPrivacy, "external"}, {"auc=0.6,profile=budget", "linear"}} {
			c := prep(t, New(func(c *Config) {
				c.Privacy = tc.privacy
				c.Model = tc.model
				if tc.model == "external" {
					c.ModelCmd = "cat"
				}
			}))
			if err := c.applyPrivacy(2, 1000); err != nil {
				t.Fatal(err)
			}
			if c.LabelFree || c.PrivacyChoice.Profile != "binary" {
				t.Errorf("%s with %s: profile %q", tc.privacy, tc.model, c.PrivacyChoice.Profile)
			}
		}
	})
	t.Run("bad", func(t *testing.T) {
		c := prep(t, New(func(c *Config) {
			c.Privacy = "auc=2"
		}))
		if err := c.applyPrivacy(2, 1000); !errors.Is(err, ErrConfig) {
			t.Errorf("auc=2: %v", err)
		}
	})
}
