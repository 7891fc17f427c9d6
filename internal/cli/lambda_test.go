package cli

import (
	"errors"
	"flag"
	"io"
	"testing"

	"github.com/asyrevel/asyrevel/run"
)

// --lambda 0 turns the regulariser off: it used to become 1e-4, because
// the configuration took a zero weight for "unset".
func TestLambdaZeroIsAValue(t *testing.T) {
	t.Parallel()
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
		if f.cfg.Lambda != tc.want {
			t.Errorf("%v: lambda %v, want %v", tc.args, f.cfg.Lambda, tc.want)
		}
	}
}

// The other flags whose zero used to mean "the default": --tolerance 0 is
// kept, --mu 0 and --hidden 0 are refused instead of replaced.
func TestZeroFlagsAreValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		err  bool
	}{
		{[]string{"--data", "synthetic", "--patience", "2", "--tolerance", "0"}, false},
		{[]string{"--data", "synthetic", "--mu", "0"}, true},
		{[]string{"--data", "synthetic", "--hidden", "0"}, true},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := newTrainFlags(fs, roleTrain)
		err := f.parse(fs, tc.args, io.Discard) // it prepares the configuration
		switch {
		case tc.err && !errors.Is(err, run.ErrConfig):
			t.Errorf("%v: error %v, want run.ErrConfig", tc.args, err)
		case !tc.err && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case !tc.err && f.cfg.Tolerance != 0:
			t.Errorf("%v: tolerance %v, want 0", tc.args, f.cfg.Tolerance)
		}
	}
}
