package experiment

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/internal/wan"
)

// Over delayed links, SynREVEL's rounds wait for the slowest party's
// round trip, so it makes at most one round per round trip, while
// AsyREVEL keeps its window of requests in flight and makes several
// times more steps in the same time. The bound fails if the proxies are
// not in the path (SynREVEL then makes thousands of steps in 3 s here).
func TestWANDelaysTheParties(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	set, locate := tinySet(t)
	slow := wan.Link{Delay: 20 * time.Millisecond}
	budget := 3 * time.Second
	rows, err := WAN(context.Background(), WANConfig{Set: set, Locate: locate, Parties: []int{2},
		Link: wan.Link{Delay: 5 * time.Millisecond}, Slow: slow, Target: 1.01, Budget: budget,
		Arms: []WANArm{{"asyrevel-gau", 8, 16}, {"synrevel-gau", 1, 16}}, Seeds: []uint64{1}, EvalEvery: time.Second, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	steps := map[string]int64{}
	for _, r := range rows {
		steps[r.Algo] = r.Steps
		if !math.IsNaN(r.Seconds) {
			t.Errorf("%s reached an accuracy of 101%%", r.Algo)
		}
	}
	rounds := budget.Seconds() / (2 * slow.Delay.Seconds())
	t.Logf("steps in %v: AsyREVEL %d, SynREVEL %d (at most %.0f rounds of 2 steps)", budget, steps["asyrevel-gau"], steps["synrevel-gau"], rounds)
	if s := steps["synrevel-gau"]; s == 0 || float64(s) > 2*rounds*1.2 {
		t.Errorf("SynREVEL made %d steps in %v over a link of %v: the delay is not in its path", s, budget, slow)
	}
	if a := steps["asyrevel-gau"]; a < 2*steps["synrevel-gau"] {
		t.Errorf("AsyREVEL made %d steps, SynREVEL %d: the window should hide the delay", a, steps["synrevel-gau"])
	}
}
