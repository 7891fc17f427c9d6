package dataset

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 24: train --data mnist failed with "stat mnist" and no hint; it is
// data/mnist after make run or asyrevel data fetch mnist.
func TestFetchHint(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, c := range []struct {
		path string
		want []string // "" for no hint
	}{
		{"mnist", []string{"asyrevel data fetch mnist", "make run", "--data data/mnist"}},
		{"data/mnist", []string{"asyrevel data fetch mnist", "--data data/mnist"}},
		{"a9a", []string{"asyrevel data fetch a9a", "--data data/a9a/a9a.gz --test data/a9a/a9a.t.gz"}},
		{"w8a.t.gz", []string{"asyrevel data fetch w8a", "--test data/w8a/w8a.t.gz"}},
		{"fashion-mnist", []string{"asyrevel data fetch fashion-mnist", "--data data/fashion-mnist"}},
		{"uci-credit-card", []string{"--data data/uci-credit-card/UCI_Credit_Card.csv.gz --preset uci-credit-card"}},
		{"mydata.csv", nil},
		{"minst", nil},
	} {
		got := FetchHint(c.path)
		if c.want == nil && got != "" {
			t.Errorf("%s: hint %q, want none", c.path, got)
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: hint %q does not say %q", c.path, got, w)
			}
		}
	}
	// Open gives the hint with the error, which is still "not exist".
	_, err := Open("mnist", OpenOptions{})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "data fetch mnist") {
		t.Errorf("Open(mnist): %v", err)
	}
	// Once fetched, the hint gives the path where it is.
	if err := os.MkdirAll(filepath.Join("data", "mnist"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := FetchHint("mnist"); !strings.Contains(got, "it is here: --data data/mnist") {
		t.Errorf("with data/mnist: %q", got)
	}
}
