package experiment

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ErrNoCgroup reports that this machine gives no CPU cgroup to limit a
// process with (no cgroup v1 cpu controller, or no permission).
var ErrNoCgroup = errors.New("no CPU cgroup available")

// cgroupCPURoot is the cgroup v1 cpu controller's mount.
var cgroupCPURoot = "/sys/fs/cgroup/cpu"

// cpuGroup is a cgroup v1 cpu group with a CFS quota: its processes get
// at most share of one processor, enforced by the kernel every period.
type cpuGroup struct {
	dir   string
	share float64
}

// newCPUGroup creates the group name under the cpu controller with quota
// share x period per period.
func newCPUGroup(name string, share float64, period time.Duration) (*cpuGroup, error) {
	if !(share > 0) || period < time.Millisecond {
		return nil, fmt.Errorf("cgroup %s: share %g, period %v", name, share, period)
	}
	if _, err := os.Stat(filepath.Join(cgroupCPURoot, "cpu.cfs_quota_us")); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	dir := filepath.Join(cgroupCPURoot, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	g := &cpuGroup{dir: dir, share: share}
	us := period.Microseconds()
	if err := g.write("cpu.cfs_period_us", strconv.FormatInt(us, 10)); err != nil {
		g.remove()
		return nil, err
	}
	if err := g.write("cpu.cfs_quota_us", strconv.FormatInt(max(1000, int64(share*float64(us))), 10)); err != nil {
		g.remove()
		return nil, err
	}
	return g, nil
}

func (g *cpuGroup) write(file, v string) error {
	if err := os.WriteFile(filepath.Join(g.dir, file), []byte(v), 0); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNoCgroup, file, err)
	}
	return nil
}

// add moves process pid, all its threads, into the group.
func (g *cpuGroup) add(pid int) error { return g.write("cgroup.procs", strconv.Itoa(pid)) }

// throttled is how many periods the group was throttled in, of how many.
func (g *cpuGroup) throttled() (throttled, periods int64) {
	b, err := os.ReadFile(filepath.Join(g.dir, "cpu.stat"))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "nr_throttled":
			throttled = v
		case "nr_periods":
			periods = v
		}
	}
	return throttled, periods
}

// remove deletes the group (its processes must have exited); it waits a
// little for the kernel to let go of exited ones.
func (g *cpuGroup) remove() error {
	var err error
	for range 50 {
		if err = os.Remove(g.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// ownCPUGroup is the cpu controller's group directory this process is in
// (from /proc/self/cgroup).
func ownCPUGroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == "cpu" {
				return filepath.Join(cgroupCPURoot, filepath.Clean("/"+f[2])), nil
			}
		}
	}
	return "", fmt.Errorf("%w: this process is in no cpu group", ErrNoCgroup)
}

// enterCPUGroup moves this process (all its threads) into a new group
// with share of a processor; leave moves it back where it was and
// removes the group.
func enterCPUGroup(name string, share float64, period time.Duration) (leave func(), err error) {
	home, err := ownCPUGroup()
	if err != nil {
		return nil, err
	}
	g, err := newCPUGroup(name, share, period)
	if err != nil {
		return nil, err
	}
	if err := g.add(os.Getpid()); err != nil {
		g.remove()
		return nil, err
	}
	return func() {
		_ = os.WriteFile(filepath.Join(home, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
		g.remove()
	}, nil
}
