package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/run"
)

func writeRunFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The example run file loads, passes every command's check, and gives each
// command what it says.
func TestExampleRunFile(t *testing.T) {
	t.Parallel()
	rf, err := loadRunFile(filepath.Join("..", "..", "examples", "run.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	get := func(cmd string, id int, args ...string) *flag.FlagSet {
		fs := commandFlags(cmd)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := rf.apply(fs, cmd, id); err != nil {
			t.Fatal(err)
		}
		return fs
	}
	cases := []struct {
		cmd        string
		id         int
		args       []string
		flag, want string
	}{
		{"party", 1, nil, "nats", "nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224"},
		{"party", 2, nil, "nats", "nats://127.0.0.1:4223,nats://127.0.0.1:4222,nats://127.0.0.1:4224"},
		{"party", 2, nil, "window", "8"},
		{"party", 3, []string{"--window", "2"}, "window", "2"}, // the command line wins
		{"aggregator", 0, nil, "duration", "1m0s"},
		{"aggregator", 0, nil, "run", "demo"},
		{"train", 0, nil, "nats", ""},
		{"broker", 2, nil, "port", "4223"},
		{"broker", 3, nil, "server-name", "n3"},
		{"broker", 1, nil, "routes", "nats://127.0.0.1:6222,nats://127.0.0.1:6223,nats://127.0.0.1:6224"},
	}
	for _, tc := range cases {
		if got := get(tc.cmd, tc.id, tc.args...).Lookup(tc.flag).Value.String(); got != tc.want {
			t.Errorf("%s %d: --%s = %q, want %q", tc.cmd, tc.id, tc.flag, got, tc.want)
		}
	}
}

// Bad run files are refused with the file's line and what is wrong.
func TestRunFileErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, text, want string
	}{
		{"unknown", "run: r\nbatsh: 3\n", `:2: unknown key "batsh"`},
		{"typo hint", "run: r\nbatsh: 3\n", `did you mean "batch"`},
		{"bad value", "run: r\nparties: 4\nbatch: many\n", `:3: batch: "many"`},
		{"bad duration", "aggregator:\n  duration: 1 minute\n", `:2: duration`},
		{"bad in party entry", "party:\n  2:\n    window: x\n", `:3: window`},
		{"not this command's", "aggregator:\n  window: 8\n", `:2: "window" is not a flag of asyrevel aggregator (it belongs to train, party)`},
		{"broker flag at party", "party:\n  1: {routes: x}\n", `:2: "routes" is not a flag of asyrevel party`},
		{"twice", "run: a\nrun: b\n", `:2: "run" given twice (first on line 1)`},
		{"no value", "run:\n", `:1: run: no value`},
		{"mapping value", "nats: {a: b}\n", `:1: nats: want a value`},
		{"not a mapping", "- run\n", `:1: want a mapping`},
		{"numbered aggregator", "aggregator:\n  1: {run: r}\n", `:2: aggregator: numbered entries`},
		{"id zero", "party:\n  0: {window: 2}\n", `:2: party 0: ids start at 1`},
		{"syntax", "run: [\n", "yaml"},
		{"config key", "config: other.yaml\n", `unknown key "config"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadRunFile(writeRunFile(t, tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	for _, args := range [][]string{
		{"train", "--config", "/nonexistent/run.yaml"},
		{"broker", "--config", "/nonexistent/run.yaml"},
	} {
		code, _, errOut := runCLI(t, args...)
		if code != 2 || !strings.Contains(errOut, "no such run file") {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
	p := writeRunFile(t, "parties: 3\nbatch: x\n")
	code, _, errOut := runCLI(t, "party", "--config", p, "--id", "1")
	if code != 2 || !strings.Contains(errOut, p+":2: batch") {
		t.Errorf("party with a bad run file: exit %d: %s", code, errOut)
	}
}

// train --config runs the file's run; a flag overrides the file.
func TestTrainConfig(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	p := writeRunFile(t, `
data: synthetic:n=2000,d=12,test=400,noise=0.02
parties: 3
batch: 16
window: 3
log: warn
train:
  epochs: 5
  out: `+out+`
`)
	code, _, errOut := runCLI(t, "train", "--config", p, "--window", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var s struct {
		Parties, Batch, Window int
	}
	if _, err := readSummary(out, &s); err != nil || s.Parties != 3 || s.Batch != 16 || s.Window != 2 {
		t.Fatalf("summary %+v (%v), want 3 parties, batch 16 from the file, window 2 from the flag", s, err)
	}
}

// A run's Config round-trips through a run file: every flag of a command
// set, the Config they fill written as a run file (each flag's value under
// its name) and read back by a fresh command gives the same Config,
// deep-equal.
func TestConfigRoundTripsThroughRunFile(t *testing.T) {
	values := map[string]string{
		"data": "synthetic", "preset": "uci-credit-card", "test": "t.csv", "label": "y", "id-column": "k",
		"categorical": "a,b", "drop": "c", "scale": "std", "algo": "asyrevel-uni", "model": "mlp",
		"model-cmd": "bin/m", "reg": "l2", "bus": "memory", "nats": "nats://h:1", "store": "s", "run": "r",
		"out": "o", "log": "warn", "adversary": "2:active", "reply": "mean", "dp-scope": "all",
		"defense-key": strings.Repeat("ab", 32), "straggler": "3:1.6", "transport": "ordered", "missing": "zero", "na": "?",
		"privacy": "auc=0.6", "persist": "sync", "compress": "s2", "tls-cert": "c.pem", "tls-key": "k.pem", "tls-ca": "ca.pem",
	}
	for _, r := range []struct {
		name string
		role role
	}{{"train", roleTrain}, {"aggregator", roleAggregator}, {"party", roleParty}} {
		fs := flag.NewFlagSet(r.name, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := newTrainFlags(fs, r.role)
		var args []string
		given := map[string]string{}
		fs.VisitAll(func(fl *flag.Flag) {
			if fl.Name == "config" || fl.Name == "id" {
				return
			}
			v, ok := values[fl.Name]
			if !ok {
				switch fl.Value.(type) {
				case interface{ IsBoolFlag() bool }:
					v = strconv.FormatBool(fl.DefValue != "true")
				default:
					v = "3"
					if g, ok := fl.Value.(flag.Getter); ok {
						if _, ok := g.Get().(time.Duration); ok {
							v = "3s"
						}
					}
				}
			}
			args = append(args, "--"+fl.Name+"="+v)
			given[fl.Name] = v
		})
		if err := fs.Parse(args); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		var file strings.Builder
		fs.VisitAll(func(fl *flag.Flag) {
			v := fl.Value.String()
			if _, ok := fl.Value.(interface{ Get() any }); !ok && v == "" {
				v = given[fl.Name] // a flag.Func has no value to show: the text it was given
			}
			if v != fl.DefValue && fl.Name != "config" && fl.Name != "id" {
				fmt.Fprintf(&file, "%s: %q\n", fl.Name, v)
			}
		})
		fs2 := flag.NewFlagSet(r.name, flag.ContinueOnError)
		fs2.SetOutput(io.Discard)
		f2 := newTrainFlags(fs2, r.role)
		if err := f2.applyRunFile(fs2, writeRunFile(t, file.String())); err != nil {
			t.Fatalf("%s: %v\n%s", r.name, err, file.String())
		}
		if !reflect.DeepEqual(f.cfg, f2.cfg) {
			t.Errorf("%s: the Config read back from the run file differs: %s\nfile:\n%s", r.name, configDiff(f2.cfg, f.cfg), file.String())
		}
	}
}

// configDiff names the fields where got and want differ.
func configDiff(got, want run.Config) string {
	var out []string
	var walk func(g, w reflect.Value, path string)
	walk = func(g, w reflect.Value, path string) {
		if g.Kind() == reflect.Struct {
			for i := range g.NumField() {
				if g.Type().Field(i).IsExported() {
					walk(g.Field(i), w.Field(i), path+"."+g.Type().Field(i).Name)
				}
			}
			return
		}
		if !reflect.DeepEqual(g.Interface(), w.Interface()) {
			out = append(out, fmt.Sprintf("%s: %v, want %v", path, g.Interface(), w.Interface()))
		}
	}
	walk(reflect.ValueOf(got), reflect.ValueOf(want), "Config")
	return strings.Join(out, "; ")
}
