package align

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/schemas"
)

// The trial: a party tests far more ids than the hub holds (in
// the issue, 100,000 against 3,000) and learns exactly which of them the
// hub holds. Over the real embedded broker, with the run's users: the hub
// refuses a party's set over 4 times its own with a message that names
// the bound and the fix, the party is told why, and nothing of the hub's
// set is in the run's log (the hub never sent it); every size is. A party
// within the bound aligns as before.
func TestHubRefusesOversizedSet(t *testing.T) {
	const run = "bound"
	r := rand.New(rand.NewPCG(5, 6))
	hub := make([]string, 75)
	for i := range hub {
		hub[i] = fmt.Sprintf("cust-%08d", r.IntN(1e8))
	}
	guesses := make([]string, 0, 500) // the hub's 75 among 425 others
	guesses = append(guesses, hub...)
	for len(guesses) < 500 {
		guesses = append(guesses, fmt.Sprintf("guess-%08d", len(guesses)))
	}
	for _, tc := range []struct {
		name  string
		party []string
		ok    bool
	}{{"oversized", guesses, false}, {"within the bound", guesses[:300], true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a bound on a hang
			defer cancel()
			l, err := StartLocal(ctx, run, 1, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var logs strings.Builder
			var logMu sync.Mutex
			log := zerolog.New(zerolog.SyncWriter(writerFunc(func(p []byte) (int, error) {
				logMu.Lock()
				defer logMu.Unlock()
				return logs.Write(p)
			}))).Level(zerolog.InfoLevel)
			spec := Spec(1, Normalization{})
			sets := [][]string{hub, tc.party}
			res := make([]*Result, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for m := range sets {
				cfg := Config{Run: run, ID: m, Parties: 1, Bus: l.Bus(m), Roster: l.Roster, Key: l.Keys[m], Spec: spec, Width: 1, Timeout: 30 * time.Second, Log: log}
				wg.Go(func() { res[m], errs[m] = Run(ctx, cfg, sets[m]) })
			}
			wg.Wait()
			if tc.ok {
				if errs[0] != nil || errs[1] != nil {
					t.Fatalf("within the bound: %v, %v", errs[0], errs[1])
				}
				if len(res[1].Rows) != 75 || res[0].MaxParty != 300 || res[0].PartySizes[0] != 300 {
					t.Fatalf("within the bound: %d rows, bound %d, sizes %v", len(res[1].Rows), res[0].MaxParty, res[0].PartySizes)
				}
			} else {
				want := "party-1 states a set of 500 keys, more than 4 times the hub's 75 (at most 300)"
				if errs[0] == nil || !strings.Contains(errs[0].Error(), want) || !strings.Contains(errs[0].Error(), "--max-ratio") {
					t.Fatalf("hub: %v, want %q and the fix", errs[0], want)
				}
				if !errors.Is(errs[0], ErrOversize) {
					t.Errorf("hub: %v does not wrap ErrOversize", errs[0])
				}
				if errs[1] == nil || !strings.Contains(errs[1].Error(), want) {
					t.Fatalf("party: %v (result %+v), want an abort saying %q", errs[1], res[1], want)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// The run's log: what the hub sent party 1, and the sizes.
			lg, err := replay.Open(ctx, replay.Source{Store: dir, Run: run})
			if err != nil {
				t.Fatal(err)
			}
			defer lg.Close()
			phases := map[string]int{}
			sizes := map[string]uint64{}
			err = lg.Each(ctx, replay.ReadOptions{Raw: true}, func(rec *replay.Record) error {
				m, err := schemas.UnmarshalAlign(rec.Data)
				if err != nil {
					return fmt.Errorf("%s: %w", rec.Subject, err)
				}
				phases[rec.Subject+" "+m.Phase.String()]++
				if m.Phase.String() == "size" {
					sizes[rec.Subject] = m.Total
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			hubSet := phases[schemas.AlignHubSubject(run, 1)+" "+schemas.AlignSet.String()]
			if tc.ok != (hubSet > 0) {
				t.Errorf("%d chunks of the hub's set in the log (%v)", hubSet, phases)
			}
			wantSizes := map[string]uint64{schemas.AlignSubject(run, 1): uint64(len(tc.party))}
			if tc.ok {
				wantSizes[schemas.AlignHubSubject(run, 1)] = uint64(len(hub))
			}
			if fmt.Sprint(sizes) != fmt.Sprint(wantSizes) {
				t.Errorf("sizes in the log %v, want %v", sizes, wantSizes)
			}
			logMu.Lock()
			defer logMu.Unlock()
			if !strings.Contains(logs.String(), `"keys":`+fmt.Sprint(len(tc.party))) {
				t.Errorf("the process log does not record the party's size: %s", logs.String())
			}
		})
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
