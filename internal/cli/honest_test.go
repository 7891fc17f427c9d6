package cli

import (
	"context"
	"strings"
	"syscall"
	"testing"
)

// A party stopped (Ctrl-C) before training started has no checkpoint to
// keep, --checkpoint-dir or not: its last words say the run had not
// started, that there is nothing to resume and how to take part again,
// and it exits 128+N like train stopped then. The stop comes while it
// joins alone (subscribing, saying hello or waiting): the same command
// then joins again, and the run ends; or once the aggregator has called
// it and taken its initial pass while waiting for the other party: the
// aggregator refuses a second join, and the words say to start every
// participant again with another --run. Before, the party said "no state
// was saved to go on from (--checkpoint-dir, or train's --out, keeps
// it)" with a --checkpoint-dir given, or failed with exit 1 ("party 1:
// subscribe: ... context canceled", "party 1: flush: ... context
// canceled") when the signal landed in a broker call.
func TestPartyStopBeforeTraining(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	for _, tc := range []struct {
		name, word string
		joined     bool // the aggregator runs and takes the party's join
		again      string
	}{
		{"joining", "joining; waiting for the aggregator's start", false, "the same command joins the run again"},
		{"joined", "called: joined; initial pass sent", true, "start them all again with another --run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := startBroker(t)
			actx, stopAgg := context.WithCancel(context.Background())
			defer stopAgg()
			common := []string{"--nats", url, "--run", "early-" + tc.name, "--parties", "2", "--data", "synthetic:n=1000,d=8,test=200",
				"--batch", "16", "--checkpoint-dir", t.TempDir()}
			aggregator := func() <-chan result {
				return goCLI(actx, append([]string{"aggregator", "--epochs", "1", "--log", "warn", "--join-wait", "1m", "--no-privacy-report", "--out", t.TempDir()}, common...)...)
			}
			var agg <-chan result
			if tc.joined {
				agg = aggregator()
			}
			args := append([]string{"party", "--id", "1", "--log", "debug"}, common...)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			errOut := &signalOn{word: tc.word, seen: make(chan struct{})}
			go func() {
				<-errOut.seen
				cancel(signalError{syscall.SIGINT})
			}()
			var stdout syncBuffer
			code := execute(ctx, args, &stdout, errOut)
			last := errOut.String()
			if i := strings.LastIndex(last, "\nasyrevel: run interrupted"); i >= 0 {
				last = last[i+1:] // the last words, after the log
			}
			if code != 130 || !strings.Contains(last, "before training started") || !strings.Contains(last, "nothing to resume") ||
				!strings.Contains(last, tc.again) || strings.Contains(last, "--resume") ||
				strings.Contains(last, "no state was saved to go on from") || strings.Contains(last, "summary") ||
				strings.Contains(stdout.String(), "no checkpoint was kept") || strings.Contains(stdout.String(), "checkpoint is saved") {
				t.Fatalf("party stopped before training: exit %d, want 130, and words that say the run had not started and how to take part again (%q): %s\n%s",
					code, tc.again, stdout.String(), last)
			}
			t.Logf("party %d: %s%s", code, stdout.String(), last)
			if tc.joined {
				stopAgg()
				<-agg
				return
			}
			// The same command joins again; with party 2 and the aggregator
			// the run ends.
			chs := []<-chan result{aggregator(), goCLI(actx, args...),
				goCLI(actx, append([]string{"party", "--id", "2", "--log", "warn"}, common...)...)}
			for i, ch := range chs {
				if r := <-ch; r.code != 0 {
					t.Fatalf("after the stopped party's start again, participant %d (0: aggregator): exit %d: %s", i, r.code, r.errOut)
				}
			}
		})
	}
}
