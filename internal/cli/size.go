package cli

import (
	"fmt"
	"strconv"
	"strings"
)

// sizeFlag is a byte count given as 500MB, 20GB, 1.5GiB, 4096 or none
// (stored as -1); 0 (unset) keeps the default.
type sizeFlag int64

func (s *sizeFlag) String() string {
	switch {
	case s == nil || *s == 0:
		return ""
	case *s < 0:
		return "none"
	}
	return strconv.FormatInt(int64(*s), 10)
}

func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"t", 1e12}, {"b", 1},
}

// parseSize reads a byte count: a number with an optional unit (B, KB,
// MB, GB, TB in powers of 1000; KiB, MiB, GiB, TiB in powers of 1024), or
// none (-1).
func parseSize(v string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(v))
	if t == "none" || t == "-1" {
		return -1, nil
	}
	mult := 1.0
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	x, err := strconv.ParseFloat(t, 64)
	if err != nil || !(x > 0) || x*mult > 1<<62 {
		return 0, fmt.Errorf("%q is not a size: want a positive number of bytes with an optional unit (500MB, 20GB, 1.5GiB) or none", v)
	}
	return int64(x * mult), nil
}

// joinInts joins party ids with ", ".
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}
