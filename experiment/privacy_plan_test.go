package experiment

import (
	"errors"
	"strings"
	"testing"

	"github.com/asyrevel/asyrevel/run"
)

// The privacy experiment's plan: the network sets renamed at another
// length and run with the paper's network, a settings filter that names
// what it does not know, and a set it does not have refused.
func TestPrivacyPlan(t *testing.T) {
	for _, tc := range []struct {
		netEpochs float64
		quick     bool
		name      string
		mlp       bool
	}{
		{3, false, "mnist", false},
		{8, false, "mnist-8ep", true},
		{8, true, "mnist", false},
	} {
		cfg := PrivacyConfig{Settings: DefaultPrivacySettings(tc.quick), Epochs: map[string]float64{"a9a": 2, "mnist": 1}}
		names := cfg.SetNetworks(tc.netEpochs, tc.quick)
		if names["mnist"] != tc.name || len(cfg.Settings[tc.name]) == 0 || cfg.Epochs[tc.name] != 1 {
			t.Fatalf("net epochs %g quick %v: named %q, %d settings, %g epochs", tc.netEpochs, tc.quick, names["mnist"], len(cfg.Settings[tc.name]), cfg.Epochs[tc.name])
		}
		if _, ok := cfg.Settings["networks"]; ok {
			t.Errorf("net epochs %g: the networks' settings are left as a set", tc.netEpochs)
		}
		c := run.Defaults()
		if st := cfg.Settings[tc.name][0]; st.Apply != nil {
			st.Apply(&c)
		}
		if (c.Model == "mlp") != tc.mlp {
			t.Errorf("net epochs %g quick %v: model %q", tc.netEpochs, tc.quick, c.Model)
		}
		if err := cfg.KeepSettings([]string{"paper"}); err != nil || len(cfg.Settings["a9a"]) != 1 {
			t.Errorf("keep paper: %v, a9a has %d settings", err, len(cfg.Settings["a9a"]))
		}
	}
	cfg := PrivacyConfig{Settings: DefaultPrivacySettings(false), Epochs: map[string]float64{}}
	if err := cfg.KeepSettings([]string{"paper", "nope"}); !errors.Is(err, ErrPrivacyPlan) || !strings.HasPrefix(err.Error(), `--settings: no setting "nope"`) {
		t.Errorf("unknown setting: %v", err)
	}
	if _, err := LoadPrivacySet(DataDir(t.TempDir()), "cifar", 8); !errors.Is(err, ErrPrivacyPlan) {
		t.Errorf("unknown set: %v", err)
	}
}
