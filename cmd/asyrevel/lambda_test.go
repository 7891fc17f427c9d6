package main

import (
	"flag"
	"io"
	"testing"

	"github.com/asyrevel/asyrevel/run"
)

// --lambda 0 turns the regulariser off: it used to become 1e-4, because
// the configuration took a zero weight for "unset".
func TestLambdaZeroIsAValue(t *testing.T) {
	for _, tc := range []struct {
		role role
		args []string
		want float64
	}{
		{roleTrain, []string{"--data", "synthetic", "--lambda", "0"}, 0},
		{roleTrain, []string{"--data", "synthetic"}, run.DefaultLambda},
		{roleTrain, []string{"--data", "synthetic", "--lambda", "0.02"}, 0.02},
		{roleParty, []string{"--data", "synthetic", "--lambda=0"}, 0},
		{roleReference, []string{"--data", "synthetic", "--lambda=0"}, 0},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := newTrainFlags(fs, tc.role)
		if err := f.parse(fs, tc.args, io.Discard); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if err := f.cfg.Prepare(); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if f.cfg.Lambda == nil || *f.cfg.Lambda != tc.want {
			t.Errorf("%v: lambda %v, want %v", tc.args, f.cfg.Lambda, tc.want)
		}
	}
}
