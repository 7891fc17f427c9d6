package experiment

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/run"
)

// The privacy experiment end to end on a small synthetic set: real runs
// over the embedded broker, attacks read back from the logs, the CSV,
// plot and report.
func TestPrivacyExperimentSmall(t *testing.T) {
	c := run.Config{Synthetic: &dataset.SyntheticConfig{Samples: 1500, TestSamples: 300, Features: 16, Classes: 2, Noise: 0.02, Seed: 4}, Parties: 4}
	if err := c.Prepare(); err != nil {
		t.Fatal(err)
	}
	data, err := run.LoadData(&c, run.RoleAll)
	if err != nil {
		t.Fatal(err)
	}
	all := DefaultPrivacySettings(true)["a9a"]
	var settings []PrivacySetting
	for _, s := range all {
		if s.Name == "tig" || s.Name == "paper" || s.Name == "dp-auc0.6" {
			settings = append(settings, s)
		}
	}
	rows, err := Privacy(context.Background(), PrivacyConfig{
		Sets: map[string]*run.Data{"syn": data}, Order: []string{"syn"}, Settings: map[string][]PrivacySetting{"syn": settings},
		Parties: 4, Epochs: map[string]float64{"syn": 12}, Seeds: []uint64{1}, Attacker: 2, Aux: 20, Store: t.TempDir(), Log: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	sum := SummarizePrivacy(rows)
	get := func(setting, who, attack string) PrivacySummary {
		for _, s := range sum {
			if s.Setting == setting && s.Attacker == who && s.Attack == attack {
				return s
			}
		}
		t.Fatalf("no row %s %s %s in %+v", setting, who, attack, sum)
		return PrivacySummary{}
	}
	if s := get("paper", "passive", "sign"); s.AUC < 0.999 || s.DropPP != 0 || !math.IsInf(s.Epsilon, 1) {
		t.Errorf("paper wire format, passive sign attack: %+v", s)
	}
	if s := get("paper", "active", "regression"); s.AUC < 0.999 {
		t.Errorf("paper wire format, active attacker: %+v", s)
	}
	if s := get("dp-auc0.6", "active", "regression"); s.AUC > 0.75 || s.Epsilon > 2 || s.AUCBound > 0.6001 {
		t.Errorf("the noised, budgeted defense against the active attacker: %+v", s)
	}
	// TIG really trains (--algo tig) and its gradients give the labels away.
	for who, cover := range map[string]int{"passive": 1400, "active": 100} {
		if s := get("tig", who, "tig-sign"); s.AUC < 0.999 || s.Covered < cover || s.TestAccuracy < 0.8 {
			t.Errorf("tig, %s gradient sign attack: %+v", who, s)
		}
	}
	if s := get("tig", "passive", "tig-direction"); s.AUC < 0.999 {
		t.Errorf("tig, direction scoring: %+v", s)
	}
	if s := get("tig", "passive", "tig-norm"); math.IsNaN(s.AUC) {
		t.Errorf("tig, norm scoring: %+v", s)
	}
	dir := t.TempDir()
	if err := WritePrivacy(dir, sum, "test"); err != nil {
		t.Fatal(err)
	}
	csv, _ := os.ReadFile(filepath.Join(dir, "privacy.csv"))
	if !strings.HasPrefix(string(csv), "setting,attacker,attack,auc,test_accuracy,accuracy_drop_pp,epsilon") {
		t.Errorf("csv header: %.80s", csv)
	}
	rep, _ := os.ReadFile(filepath.Join(dir, "REPORT-privacy.md"))
	if !strings.Contains(string(rep), "| tig |") || !strings.Contains(string(rep), "| paper |") || !strings.Contains(string(rep), "TIG (split learning") {
		t.Errorf("report:\n%s", rep)
	}
	if st, err := os.Stat(filepath.Join(dir, "privacy.png")); err != nil || st.Size() == 0 {
		t.Errorf("plot: %v", err)
	}
}

func TestDCS(t *testing.T) {
	// No attack success, no accuracy lost: 1.
	if d := dcs(0, 0.85, 0.85); d != 1 {
		t.Errorf("ideal %g", d)
	}
	// AP 1, no loss: 1/(1+sqrt(0.5)).
	if d := dcs(1, 0.85, 0.85); math.Abs(d-1/(1+math.Sqrt(0.5))) > 1e-12 {
		t.Errorf("undefended %g", d)
	}
	// An accuracy gain is not rewarded.
	if dcs(0.5, 0.9, 0.85) != dcs(0.5, 0.85, 0.85) {
		t.Error("gain rewarded")
	}
}

// A partial run's rows replace those of its settings in place; their
// accuracy drop is taken against the earlier run's undefended setting.
func TestMergePrivacy(t *testing.T) {
	old := []PrivacySummary{
		{Set: "a", Setting: "tig", Attacker: "passive", Attack: "tig-sign", Note: "not run"},
		{Set: "a", Setting: "paper", Attacker: "passive", Attack: "sign", AUC: 1, TestAccuracy: 0.85},
		{Set: "a", Setting: "rr", Attacker: "passive", Attack: "sign", AUC: 0.7, TestAccuracy: 0.8, DropPP: 5},
	}
	fresh := []PrivacySummary{
		{Set: "a", Setting: "tig", Attacker: "passive", Attack: "tig-sign", AUC: 1, AttackAccuracy: 1, TestAccuracy: 0.84, DropPP: nanF},
		{Set: "a", Setting: "tig", Attacker: "passive", Attack: "tig-norm", AUC: 0.6, TestAccuracy: 0.84, DropPP: nanF},
	}
	got := MergePrivacy(old, fresh)
	var names []string
	for _, s := range got {
		names = append(names, s.Setting+"/"+s.Attack)
	}
	if want := "tig/tig-sign tig/tig-norm paper/sign rr/sign"; strings.Join(names, " ") != want {
		t.Fatalf("merged %v, want %s", names, want)
	}
	if d := got[0].DropPP; math.Abs(d-1) > 1e-9 || got[3].DropPP != 5 || math.IsNaN(got[0].DCS) {
		t.Errorf("drops: tig %g (want 1), rr %g (want 5), dcs %g", d, got[3].DropPP, got[0].DCS)
	}
}
