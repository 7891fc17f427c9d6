package cli

import (
	"flag"
	"io"
	"testing"
	"time"
)

// --checkpoint-every's default is 0, the adaptive period (ckpt.Every); a
// period given on the command line or in a run file, such as the 10s of
// the former default, keeps its exact meaning.
func TestCheckpointEveryDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		file string
		want time.Duration
	}{
		{name: "default: adaptive", want: 0},
		{name: "flag 10s", args: []string{"--checkpoint-every", "10s"}, want: 10 * time.Second},
		{name: "flag 0", args: []string{"--checkpoint-every", "0"}, want: 0},
		{name: "flag never", args: []string{"--checkpoint-every", "-1s"}, want: -time.Second},
		{name: "run file 10s", file: "checkpoint-every: 10s\n", want: 10 * time.Second},
		{name: "run file 250ms", file: "checkpoint-every: 250ms\n", want: 250 * time.Millisecond},
	} {
		for _, r := range []role{roleTrain, roleAggregator, roleParty} {
			fs := flag.NewFlagSet("train", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := newTrainFlags(fs, r)
			if d := fs.Lookup("checkpoint-every").DefValue; d != "0s" {
				t.Fatalf("%s: --checkpoint-every's default is %s, want 0s (adaptive)", tc.name, d)
			}
			if err := fs.Parse(tc.args); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if tc.file != "" {
				if err := f.applyRunFile(fs, writeRunFile(t, tc.file)); err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
			}
			if f.cfg.CheckpointEvery != tc.want {
				t.Errorf("%s (role %d): CheckpointEvery %v, want %v", tc.name, r, f.cfg.CheckpointEvery, tc.want)
			}
		}
	}
}
