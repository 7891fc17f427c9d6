package cli

import (
	"flag"
	"io"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// commandPaths lists every command and subcommand of the command table, so
// that commands added later are checked too.
func commandPaths() [][]string {
	var paths [][]string
	for _, c := range commands {
		paths = append(paths, []string{c.name})
		for _, s := range c.subs {
			paths = append(paths, []string{c.name, s})
		}
	}
	return paths
}

// flagLine is a flag in help output: "  -name PLACEHOLDER".
var flagLine = regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9-]*)(?: (.*))?$`)

// helpFlags returns the flags a help text lists and their placeholders.
func helpFlags(help string) map[string]string {
	flags := map[string]string{}
	for _, line := range strings.Split(help, "\n") {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			flags[m[1]] = m[2]
		}
	}
	return flags
}

// Item 8: every command answers -h, --help and "asyrevel help ..." with its
// usage, never reads them as an argument, and shows no placeholder
// artefacts (a flag's placeholder is one word).
func TestHelpEveryCommand(t *testing.T) {
	t.Parallel()
	word := regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)
	for _, path := range commandPaths() {
		name := strings.Join(path, " ")
		for _, form := range [][]string{
			append(append([]string(nil), path...), "-h"),
			append(append([]string(nil), path...), "--help"),
			append([]string{"help"}, path...),
		} {
			code, out, errOut := runCLI(t, form...)
			help := out + errOut
			if code != 0 || !strings.Contains(help, "Usage") {
				t.Errorf("%q: exit %d, want 0 and a usage text: %s", form, code, help)
				continue
			}
			for _, bad := range []string{"no such file", "unexpected argument", "takes one", "unknown"} {
				if strings.Contains(help, bad) {
					t.Errorf("%q: the help flag was read as an argument (%q): %s", form, bad, help)
				}
			}
			if strings.Contains(help, "`") {
				t.Errorf("%s: a backquote in the help text (the flag package takes `X` for a placeholder): %s", name, help)
			}
			for f, ph := range helpFlags(help) {
				if ph != "" && !word.MatchString(ph) {
					t.Errorf("%s: flag -%s shows the placeholder %q: an artefact of backquotes in its usage", name, f, ph)
				}
			}
		}
	}
}

// Item 8: party and aggregator show only the flags they use; train shows
// them all.
func TestHelpFlagsByRole(t *testing.T) {
	t.Parallel()
	trainOnly := []string{"store", "cluster", "in-process", "bus"}
	cases := []struct {
		cmd     string
		want    []string
		notWant []string
	}{
		{"party", []string{"id", "nats", "run", "data", "label", "parties", "mu", "lr", "window", "batch", "model", "model-cmd", "scale", "join-wait", "wait", "out"},
			append([]string{"eval-every", "epochs", "duration", "steps", "target", "stop-at-target", "delta", "head-lr", "bias"}, trainOnly...)},
		{"aggregator", []string{"nats", "run", "data", "label", "parties", "mu", "batch", "epochs", "duration", "out", "eval-every", "delta", "bias", "join-wait", "wait"},
			append([]string{"model", "hidden", "model-cmd", "model-timeout", "lr", "window", "lambda", "reg", "scale"}, trainOnly...)},
		{"train", append([]string{"data", "label", "scale", "lr", "window", "out", "epochs", "join-wait"}, trainOnly...), []string{"id"}},
	}
	for _, tc := range cases {
		_, out, errOut := runCLI(t, tc.cmd, "-h")
		flags := helpFlags(out + errOut)
		for _, f := range tc.want {
			if _, ok := flags[f]; !ok {
				t.Errorf("%s -h does not show -%s", tc.cmd, f)
			}
		}
		for _, f := range tc.notWant {
			if _, ok := flags[f]; ok {
				t.Errorf("%s -h shows -%s, which it does not use", tc.cmd, f)
			}
		}
	}
	// A flag of another role is refused with a word on whose it is.
	code, _, errOut := runCLI(t, "aggregator", "--nats", "nats://x", "--run", "r", "--window", "2", "--data", "synthetic", "--epochs", "1")
	if code != 2 || !strings.Contains(errOut, "--window is a flag of train, party") {
		t.Errorf("aggregator --window: exit %d: %s", code, errOut)
	}
}

// Item 8: each training flag a command shows is wired into the run's
// configuration: setting it changes what the command would run.
func TestTrainFlagsAreRead(t *testing.T) {
	t.Parallel()
	values := map[string]string{
		"data": "synthetic", "preset": "uci-credit-card", "test": "t.csv", "label": "y", "id-column": "k",
		"categorical": "a,b", "drop": "c", "scale": "std", "algo": "asyrevel-uni", "model": "mlp",
		"model-cmd": "bin/m", "reg": "l2", "bus": "memory", "nats": "nats://h:1", "store": "s", "run": "r",
		"out": "o", "log": "warn", "adversary": "2:active", "reply": "mean", "dp-scope": "all",
		"defense-key": strings.Repeat("ab", 32), "straggler": "3:1.6", "transport": "ordered", "missing": "zero", "na": "?",
	}
	for _, r := range []struct {
		name string
		role role
	}{{"train", roleTrain}, {"aggregator", roleAggregator}, {"party", roleParty}, {"reference", roleReference}, {"firstorder", roleFirstOrder}} {
		probe := flag.NewFlagSet(r.name, flag.ContinueOnError)
		newTrainFlags(probe, r.role)
		probe.VisitAll(func(fl *flag.Flag) {
			fs := flag.NewFlagSet(r.name, flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := newTrainFlags(fs, r.role)
			before := *f
			before.cfg.CSV.Categorical = append([]string(nil), f.cfg.CSV.Categorical...)
			v, ok := values[fl.Name]
			if !ok {
				switch fl.Value.(type) {
				case interface{ IsBoolFlag() bool }:
					v = "true"
					if fl.DefValue == "true" {
						v = "false"
					}
				default:
					v = "3"
					if g, ok := fl.Value.(flag.Getter); ok {
						if _, ok := g.Get().(time.Duration); ok {
							v = "3s"
						}
					}
				}
			}
			if err := fs.Parse([]string{"--" + fl.Name + "=" + v}); err != nil {
				t.Errorf("%s --%s=%s: %v", r.name, fl.Name, v, err)
				return
			}
			if reflect.DeepEqual(before.cfg, f.cfg) && reflect.DeepEqual(before.hooks, f.hooks) && before.seed == f.seed && before.scale == f.scale &&
				before.logLevel == f.logLevel && before.logJSON == f.logJSON && before.verbose == f.verbose && before.straggler == f.straggler && (f.bias == nil || *f.bias) {
				t.Errorf("%s: --%s=%s changes nothing the command reads", r.name, fl.Name, v)
			}
		})
	}
}

// predict scores a batch: a chunk's request that outlasts --timeout fails
// the whole batch, so its default is serve's (a caller waits on each
// answer) times fifteen. A busy host took over 2 s for a chunk.
func TestPredictWaitsLongerThanServe(t *testing.T) {
	t.Parallel()
	for cmd, want := range map[string]string{"predict": "(default 30s)", "serve": "(default 2s)"} {
		_, out, errOut := runCLI(t, cmd, "-h")
		help := out + errOut
		i := strings.Index(help, "\n  -timeout")
		if i < 0 {
			t.Fatalf("%s -h shows no -timeout:\n%s", cmd, help)
		}
		line := help[i+1:]
		if j := strings.Index(line, "\n  -"); j >= 0 {
			line = line[:j]
		}
		if !strings.Contains(line, want) {
			t.Errorf("%s -timeout: %q, want %s", cmd, line, want)
		}
	}
}
