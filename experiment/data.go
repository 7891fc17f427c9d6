package experiment

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/asyrevel/asyrevel/run"
)

// DataDir is the Locate of a data folder as "asyrevel data fetch" lays it
// out: dir, or with dir "" the first of data and ../shared/data that
// holds the file.
func DataDir(dir string) Locate {
	return func(rel string) (string, error) {
		dirs := []string{dir}
		if dir == "" {
			dirs = []string{"data", filepath.Join("..", "shared", "data")}
		}
		for _, d := range dirs {
			p := filepath.Join(d, rel)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
		return "", fmt.Errorf("%s not found in %s: run \"asyrevel data fetch %s\" first", rel, strings.Join(dirs, " or "), strings.Split(rel, "/")[0])
	}
}

// LoadA9A reads a9a and its test set, split over q parties as
// `asyrevel train` would split them (the throughput, tta, adversary and
// privacy experiments).
func LoadA9A(locate Locate, q int) (*run.Data, error) {
	tr, err := locate("a9a/a9a.gz")
	if err != nil {
		return nil, err
	}
	te, err := locate("a9a/a9a.t.gz")
	if err != nil {
		return nil, err
	}
	cfg := run.New(func(c *run.Config) {
		c.Data = tr
		c.Test = te
		c.Parties = q
	})
	if err := cfg.Prepare(); err != nil {
		return nil, err
	}
	return run.LoadData(&cfg, run.RoleAll)
}
