package experiment

import (
	"testing"
	"time"
)

func TestSummarizeRSS(t *testing.T) {
	const mb = 1 << 20
	sample := func(f func(sec float64) int64) []SoakSample {
		var s []SoakSample
		for sec := 5.0; sec <= 600; sec += 5 {
			s = append(s, SoakSample{Seconds: sec, RSS: f(sec)})
		}
		return s
	}
	tests := []struct {
		name string
		rss  func(sec float64) int64
		flat bool
	}{
		// The garbage collector's sawtooth: every third sample 15% higher,
		// the last one among them. Flat, though the last sample is not.
		{"sawtooth", func(sec float64) int64 {
			if int(sec/5)%3 == 0 {
				return 115 * mb
			}
			return 100 * mb
		}, true},
		{"steady growth", func(sec float64) int64 { return int64((100 + sec/20) * mb) }, false},
		{"flat", func(float64) int64 { return 100 * mb }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &SoakResult{Samples: sample(tc.rss), Reference: time.Minute, Window: time.Minute}
			summarizeRSS(r, func(s SoakSample) int64 { return s.RSS })
			if r.Flat != tc.flat {
				t.Errorf("flat %v, want %v (ref %d, end %d, growth %.3f)", r.Flat, tc.flat, r.RSSRef/mb, r.RSSEnd/mb, r.Growth)
			}
			if r.RSSLast != tc.rss(600) {
				t.Errorf("last sample %d, want %d", r.RSSLast, tc.rss(600))
			}
		})
	}
}
