package cli

import "testing"

func TestParseSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{"4096", 4096, false}, {"500MB", 500e6, false}, {"20GB", 20e9, false}, {"1.5GiB", 3 << 29, false},
		{"64 KiB", 64 << 10, false}, {"none", -1, false}, {"-1", -1, false}, {"10b", 10, false},
		{"", 0, true}, {"0", 0, true}, {"-5MB", 0, true}, {"lots", 0, true}, {"NaN", 0, true}, {"1e30GB", 0, true},
	} {
		got, err := parseSize(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && got != tc.want) {
			t.Errorf("parseSize(%q) = %d, %v; want %d, bad %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}
