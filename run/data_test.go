package run

import (
	"errors"
	"strings"
	"testing"

	"github.com/asyrevel/asyrevel/dataset"
)

// The data's contradictory options are the run's ErrConfig (a usage
// error: exit 2 on the command line), worded as before.
func TestLoadDataConfigError(t *testing.T) {
	cfg := New(func(c *Config) { c.Data, c.Preset, c.Test, c.Parties = "x", "a9a", "t", 2 })
	_, err := LoadData(&cfg, RoleAll)
	if !errors.Is(err, ErrConfig) || !errors.Is(err, dataset.ErrOptions) {
		t.Fatalf("%v: want ErrConfig", err)
	}
	if !strings.HasPrefix(err.Error(), "invalid settings: --preset a9a makes its own test split") {
		t.Errorf("message: %v", err)
	}
}
