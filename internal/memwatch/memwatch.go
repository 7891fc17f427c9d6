// Package memwatch stops a test binary that runs away with memory: a
// watcher samples the Go runtime's memory every 250 ms and, past a
// ceiling, writes every goroutine's stack to standard error and exits
// with status 3, so that the culprit shows at once instead of the kernel
// killing the process (or the machine) later with nothing to read.
//
// Test binaries start it from TestMain (Start); the ceiling is
// ASYREVEL_TEST_MEM (a number of bytes with an optional KiB, MiB or GiB
// suffix), 6 GiB by default, "off" to disable. It also sets the runtime's
// soft memory limit to the ceiling, so the collector works harder
// before the watcher gives up.
package memwatch

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// DefaultCeiling is the ceiling without ASYREVEL_TEST_MEM.
const DefaultCeiling = 6 << 30

// Env names the variable that sets the ceiling.
const Env = "ASYREVEL_TEST_MEM"

// Start starts the watcher (once per process) and returns the ceiling in
// bytes, 0 when disabled.
func Start() int64 {
	c, err := Ceiling(os.Getenv(Env))
	if err != nil {
		fmt.Fprintf(os.Stderr, "memwatch: %v; using %d bytes\n", err, int64(DefaultCeiling))
		c = DefaultCeiling
	}
	if c == 0 {
		return 0
	}
	debug.SetMemoryLimit(c)
	go watch(c, 250*time.Millisecond, func(used int64) {
		buf := make([]byte, 64<<20)
		n := runtime.Stack(buf, true)
		fmt.Fprintf(os.Stderr, "memwatch: the Go runtime holds %d MiB, past the ceiling of %d MiB (%s): every goroutine's stack follows\n%s\n",
			used>>20, c>>20, Env, buf[:n])
		os.Exit(3)
	})
	return c
}

// Ceiling parses a ceiling: "" (the default), "off" (0), or bytes with an
// optional KiB, MiB or GiB suffix.
func Ceiling(v string) (int64, error) {
	v = strings.TrimSpace(v)
	switch strings.ToLower(v) {
	case "":
		return DefaultCeiling, nil
	case "off", "0":
		return 0, nil
	}
	mult := int64(1)
	for _, u := range []struct {
		s string
		m int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if rest, ok := strings.CutSuffix(v, u.s); ok {
			v, mult = rest, u.m
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n <= 0 || n > (1<<50)/mult {
		return 0, fmt.Errorf("%s=%q: want bytes, e.g. 6GiB, or off", Env, v)
	}
	return n * mult, nil
}

var sample = []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}

// used is the memory the runtime has mapped and not released.
func used() int64 {
	s := append([]metrics.Sample(nil), sample...)
	metrics.Read(s)
	return int64(s[0].Value.Uint64()) - int64(s[1].Value.Uint64())
}

// watch calls over once the runtime's memory passes ceiling.
func watch(ceiling int64, every time.Duration, over func(int64)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for range t.C {
		if u := used(); u > ceiling {
			over(u)
			return
		}
	}
}
