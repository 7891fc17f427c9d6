package experiment

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Without a cpu controller the group is refused with ErrNoCgroup, and a
// bad share with another error; with a writable one (a fake tree here) the
// quota and period are written and the group removed.
func TestCPUGroup(t *testing.T) {
	old := cgroupCPURoot
	defer func() { cgroupCPURoot = old }()
	cgroupCPURoot = t.TempDir()
	if _, err := newCPUGroup("g", 0.25, 10*time.Millisecond); !errors.Is(err, ErrNoCgroup) {
		t.Fatalf("no controller: %v", err)
	}
	if err := os.WriteFile(filepath.Join(cgroupCPURoot, "cpu.cfs_quota_us"), []byte("-1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := newCPUGroup("g", 0, 10*time.Millisecond); err == nil || errors.Is(err, ErrNoCgroup) {
		t.Fatalf("share 0: %v", err)
	}
	g, err := newCPUGroup("g", 0.25, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"cpu.cfs_period_us": "10000", "cpu.cfs_quota_us": "2500"} {
		if b, _ := os.ReadFile(filepath.Join(g.dir, file)); string(b) != want {
			t.Errorf("%s = %q, want %q", file, b, want)
		}
	}
	os.WriteFile(filepath.Join(g.dir, "cpu.stat"), []byte("nr_periods 10\nnr_throttled 4\nthrottled_time 5\n"), 0o644)
	if th, per := g.throttled(); th != 4 || per != 10 {
		t.Errorf("throttled %d of %d, want 4 of 10", th, per)
	}
	for _, f := range []string{"cpu.cfs_period_us", "cpu.cfs_quota_us", "cpu.stat"} {
		os.Remove(filepath.Join(g.dir, f)) // a real cgroup's files go with it
	}
	if err := g.remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.dir); !os.IsNotExist(err) {
		t.Errorf("group not removed: %v", err)
	}
}
