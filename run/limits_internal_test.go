package run

import (
	"slices"
	"testing"

	"github.com/asyrevel/asyrevel/trust"
)

// The subjects MaxMessage counts for a run without keys are its roster's.
func TestRunSubjectsAreTheRosters(t *testing.T) {
	r, _, err := trust.GenerateRun("subj", 3)
	if err != nil {
		t.Fatal(err)
	}
	got := runSubjects("subj", 3)
	slices.Sort(got)
	if !slices.Equal(got, r.AllSubjects()) {
		t.Fatalf("runSubjects\n%q\nthe roster's\n%q", got, r.AllSubjects())
	}
}

// The bounds: a default a9a run's, a roster's, and what they cover.
func TestMessageBounds(t *testing.T) {
	for _, c := range []struct {
		name        string
		set         func(*Config)
		least, most int32
	}{
		{"a9a default", func(c *Config) { c.Parties, c.Batch, c.Run = 8, 256, "a9a" }, 16 << 10, 64 << 10},
		{"batch 1", func(c *Config) { c.Parties, c.Batch, c.Run = 8, 1, "b1" }, 16 << 10, 64 << 10},
		{"batch 8192, k 10", func(c *Config) { c.Parties, c.Batch, c.K, c.Run = 4, 8192, 10, "big" }, 1 << 20, 4 << 20},
		{"1024 parties", func(c *Config) { c.Parties, c.Batch, c.Run = 1024, 64, "wide" }, 256 << 10, 4 << 20},
	} {
		cfg := New(c.set)
		n := MaxMessage(&cfg)
		t.Logf("%s: %d bytes", c.name, n)
		if n < c.least || n > c.most {
			t.Errorf("%s: MaxMessage %d, want %d..%d", c.name, n, c.least, c.most)
		}
	}
	r, _, err := trust.GenerateRun("roster", 8)
	if err != nil {
		t.Fatal(err)
	}
	n := RosterMaxMessage(r)
	t.Logf("roster of 8 parties: %d bytes", n)
	if n < 512<<10 || n > 1<<20 {
		t.Errorf("RosterMaxMessage %d", n)
	}
}
