package align

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/trust"
)

// runAll aligns sets[0] (the hub's) with sets[1:] over buses, one
// goroutine an organisation, and returns each one's result and error.
func runAll(t *testing.T, run string, buses []broker.Bus, sets [][]string, tweak func(*Config)) ([]*Result, []error) {
	t.Helper()
	q := len(sets) - 1
	roster, keys, err := trust.GenerateRun(run, q)
	if err != nil {
		t.Fatal(err)
	}
	// Bounds on a hang, not on speed: the group arithmetic under the race
	// detector at load 20 is many times slower than on a quiet machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	spec := Spec(1, Normalization{})
	res := make([]*Result, q+1)
	errs := make([]error, q+1)
	var wg sync.WaitGroup
	for m := range sets {
		cfg := Config{Run: run, ID: m, Parties: q, Bus: buses[m], Roster: roster, Key: keys[m], Spec: spec, Width: m, Timeout: 30 * time.Second}
		if tweak != nil {
			tweak(&cfg)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[m], errs[m] = Run(ctx, cfg, sets[m])
		}()
	}
	wg.Wait()
	return res, errs
}

func memBuses(n int) []broker.Bus {
	h := broker.NewMemoryHub()
	out := make([]broker.Bus, n)
	for i := range out {
		out[i] = h.Connect(fmt.Sprint("org-", i))
	}
	return out
}

// randomSets draws q+1 sets of n ids each from a pool with random
// overlaps, and the plain intersection in the hub's row order.
// shortIDs is n ids, or a tenth of them under -short: the short suite
// runs under the race detector, which makes the group arithmetic tens of
// times slower.
func shortIDs(n int) int {
	if testing.Short() {
		return max(n/10, 50)
	}
	return n
}

func randomSets(r *rand.Rand, orgs, n int) [][]string {
	pool := make([]string, 2*n)
	for i := range pool {
		pool[i] = fmt.Sprintf("cust-%08d", r.IntN(1e8))
	}
	pool = slices.Compact(slices.Sorted(slices.Values(pool)))
	sets := make([][]string, orgs)
	for m := range sets {
		p := r.Perm(len(pool))[:n]
		for _, i := range p {
			sets[m] = append(sets[m], pool[i])
		}
	}
	return sets
}

// plainIntersection is the hashed join in the clear: the keys every set
// holds.
func plainIntersection(sets [][]string) map[string]bool {
	count := map[string]int{}
	for _, s := range sets {
		for _, k := range s {
			count[k]++
		}
	}
	out := map[string]bool{}
	for k, c := range count {
		if c == len(sets) {
			out[k] = true
		}
	}
	return out
}

func checkAligned(t *testing.T, sets [][]string, res []*Result) {
	t.Helper()
	want := plainIntersection(sets)
	var order []string
	for m, r := range res {
		got := make([]string, len(r.Rows))
		for k, row := range r.Rows {
			got[k] = sets[m][row]
		}
		if m == 0 {
			order = got
			if len(got) != len(want) {
				t.Fatalf("hub: %d rows, the plain intersection has %d", len(got), len(want))
			}
			for _, k := range got {
				if !want[k] {
					t.Fatalf("hub: a row outside the intersection")
				}
			}
			continue
		}
		if !slices.Equal(got, order) {
			t.Fatalf("party %d's rows are not the hub's keys in the hub's order", m)
		}
	}
}

func TestAlignThreeOrgs(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sets := randomSets(r, 3, shortIDs(3000))
	res, errs := runAll(t, "t3", memBuses(3), sets, nil)
	for m, err := range errs {
		if err != nil {
			t.Fatalf("org %d: %v", m, err)
		}
	}
	checkAligned(t, sets, res)
	if res[0].Features != 3 || res[2].Lo != 1 || res[1].Lo != 0 {
		t.Errorf("layout: hub features %d, party 1 lo %d, party 2 lo %d", res[0].Features, res[1].Lo, res[2].Lo)
	}
	if len(res[0].Rows) == 0 {
		t.Fatal("empty intersection")
	}
	t.Logf("intersection %d; hub sent %d bytes, party 1 %d", len(res[0].Rows), res[0].Stats.BytesSent, res[1].Stats.BytesSent)
}

func TestAlignPeerErrors(t *testing.T) {
	sets := [][]string{{"a", "b", "c"}, {"b", "c", "d"}}
	t.Run("spec", func(t *testing.T) {
		_, errs := runAll(t, "spec", memBuses(2), sets, func(c *Config) {
			if c.ID == 1 {
				c.Spec = Spec(2, Normalization{})
			}
		})
		// Each side may see the other's specification first; at least
		// one names the difference, and neither hangs or succeeds.
		for _, err := range errs {
			if !errors.Is(err, ErrPeer) && !errors.Is(err, ErrAborted) {
				t.Fatalf("errors %v / %v", errs[0], errs[1])
			}
		}
		if !errors.Is(errs[0], ErrPeer) && !errors.Is(errs[1], ErrPeer) {
			t.Fatalf("nobody names the difference: %v / %v", errs[0], errs[1])
		}
		if !strings.Contains(errs[0].Error(), "key specification") && !strings.Contains(errs[1].Error(), "key specification") {
			t.Fatalf("errors %v / %v", errs[0], errs[1])
		}
	})
}
