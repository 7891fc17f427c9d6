package experiment

import (
	"errors"
	"fmt"
	"slices"

	"github.com/asyrevel/asyrevel/run"
)

// ErrPrivacyPlan reports a set or setting the privacy experiment does not
// have (errors.Is; the error's text names the flag and the value).
var ErrPrivacyPlan = errors.New("not in the privacy experiment")

type planError string

func (e planError) Error() string      { return string(e) }
func (planError) Is(target error) bool { return target == ErrPrivacyPlan }

// SetNetworks gives the network sets (MNIST and Fashion-MNIST) their
// settings: MNIST's. At a length (netEpochs passes) other than the
// default 3 and without quick, the sets are renamed with it (mnist-8ep)
// and run the networks' settings with the paper's network (--model mlp);
// at 3, linear parties. It returns each network set's name in the
// results, and drops the "networks" settings.
func (cfg *PrivacyConfig) SetNetworks(netEpochs float64, quick bool) map[string]string {
	netName := map[string]string{"mnist": "mnist", "fashion-mnist": "fashion-mnist"}
	for set := range netName {
		if netEpochs != 3 && !quick {
			// The paper's network: 8 parties' MLPs (--model mlp).
			netName[set] = fmt.Sprintf("%s-%gep", set, netEpochs)
			var mlp []PrivacySetting
			for _, st := range cfg.Settings["networks"] {
				apply := st.Apply
				st.Apply = func(c *run.Config) {
					c.Model = "mlp"
					if apply != nil {
						apply(c)
					}
				}
				mlp = append(mlp, st)
			}
			cfg.Settings[netName[set]] = mlp
		} else {
			cfg.Settings[netName[set]] = cfg.Settings["mnist"]
		}
		cfg.Epochs[netName[set]] = cfg.Epochs["mnist"]
	}
	delete(cfg.Settings, "networks")
	return netName
}

// KeepSettings keeps, for every set, only the settings named; a name no
// set has is an error (ErrPrivacyPlan).
func (cfg *PrivacyConfig) KeepSettings(names []string) error {
	found := map[string]bool{}
	for set, all := range cfg.Settings {
		var keep []PrivacySetting
		for _, st := range all {
			if slices.Contains(names, st.Name) {
				keep, found[st.Name] = append(keep, st), true
			}
		}
		cfg.Settings[set] = keep
	}
	for _, nm := range names {
		if !found[nm] {
			return planError(fmt.Sprintf("--settings: no setting %q in this experiment", nm))
		}
	}
	return nil
}

// LoadPrivacySet reads one of the privacy experiment's sets (a9a, mnist,
// fashion-mnist) split over q parties; another name is ErrPrivacyPlan.
func LoadPrivacySet(locate Locate, set string, q int) (*run.Data, error) {
	switch set {
	case "a9a":
		return LoadA9A(locate, q)
	case "mnist", "fashion-mnist":
		dir, err := locate(set)
		if err != nil {
			return nil, err
		}
		c := run.New(func(c *run.Config) {
			c.Data = dir
			c.Parties = q
		})
		if err := c.Prepare(); err != nil {
			return nil, err
		}
		return run.LoadData(&c, run.RoleAll)
	}
	return nil, planError(fmt.Sprintf("--sets: %q (want a9a, mnist, fashion-mnist)", set))
}
