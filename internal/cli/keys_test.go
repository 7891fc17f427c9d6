package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/trust"
	"github.com/nats-io/nats.go"
)

func TestKeysRun(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "keys")
	code, out, errOut := runCLI(t, "keys", "--run", "r1", "--parties", "3", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	roster, err := trust.ReadRoster(filepath.Join(dir, "roster.json"))
	if err != nil {
		t.Fatal(err)
	}
	if roster.Run != "r1" || roster.Parties() != 3 {
		t.Fatalf("roster %+v", roster)
	}
	for _, id := range []string{"aggregator", "party-1", "party-2", "party-3"} {
		path := filepath.Join(dir, id+".nk")
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if runtime.GOOS != "windows" && st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %o", path, st.Mode().Perm())
		}
		k, err := trust.ReadKeyFile(path)
		if err != nil {
			t.Fatal(err)
		}
		p, err := roster.Identify(k)
		if err != nil || p.ID != id {
			t.Fatalf("%s's key is in the roster as %v (%v)", id, p, err)
		}
		if !strings.Contains(out, k.PublicKey()) {
			t.Errorf("output lacks %s's public key", id)
		}
		if _, err := nats.NkeyOptionFromSeed(path); err != nil {
			t.Errorf("nats.go cannot read %s: %v", path, err)
		}
	}
	// Nothing is replaced without --force.
	before, _ := os.ReadFile(filepath.Join(dir, "party-2.nk"))
	code, _, errOut = runCLI(t, "keys", "--run", "r1", "--parties", "3", "--out", dir)
	if code != 1 || !strings.Contains(errOut, "exists") || !strings.Contains(errOut, "--force") {
		t.Fatalf("second run: exit %d, %s", code, errOut)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "party-2.nk")); string(after) != string(before) {
		t.Fatal("a key was replaced without --force")
	}
	if code, _, errOut = runCLI(t, "keys", "--run", "r1", "--parties", "3", "--out", dir, "--force"); code != 0 {
		t.Fatalf("--force: %s", errOut)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "party-2.nk")); string(after) == string(before) {
		t.Fatal("--force did not make new keys")
	}
}

func TestKeysOneAndRoster(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pubs := map[string]string{}
	for _, id := range []string{"aggregator", "party-1", "party-2"} {
		path := filepath.Join(dir, id+".nk")
		code, out, errOut := runCLI(t, "keys", "--id", id, "--out", path)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		pub := strings.TrimSpace(out)
		k, err := trust.ReadKeyFile(path)
		if err != nil || k.PublicKey() != pub {
			t.Fatalf("%s: printed %q, file holds %v (%v)", id, pub, k, err)
		}
		if !strings.Contains(errOut, "keys roster") {
			t.Errorf("no hint on what to do with the key: %s", errOut)
		}
		code, out, _ = runCLI(t, "keys", "public", path)
		if code != 0 || strings.TrimSpace(out) != pub {
			t.Fatalf("keys public: %d %q", code, out)
		}
		pubs[id] = pub
	}
	// One public key as a file, the others inline.
	pubFile := filepath.Join(dir, "aggregator.pub")
	os.WriteFile(pubFile, []byte(pubs["aggregator"]+"\n"), 0o644)
	rosterPath := filepath.Join(dir, "roster.json")
	code, out, errOut := runCLI(t, "keys", "roster", "--run", "r2", "--out", rosterPath,
		"aggregator=@"+pubFile, "party-2="+pubs["party-2"], "party-1="+pubs["party-1"])
	if code != 0 {
		t.Fatalf("keys roster: exit %d: %s", code, errOut)
	}
	r, err := trust.ReadRoster(rosterPath)
	if err != nil || r.Parties() != 2 || r.Party(1).PublicKey != pubs["party-1"] || r.Aggregator().PublicKey != pubs["aggregator"] {
		t.Fatalf("roster %v %+v; %s", err, r, out)
	}
	data, _ := os.ReadFile(rosterPath)
	for _, id := range []string{"aggregator", "party-1", "party-2"} {
		seed, _ := os.ReadFile(filepath.Join(dir, id+".nk"))
		if strings.Contains(string(data), strings.TrimSpace(string(seed))) {
			t.Fatal("the roster holds a seed")
		}
	}
}

func TestKeysServerConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if code, _, errOut := runCLI(t, "keys", "--run", "sc", "--parties", "2", "--out", dir); code != 0 {
		t.Fatal(errOut)
	}
	code, out, errOut := runCLI(t, "keys", "server-config", filepath.Join(dir, "roster.json"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	r, _ := trust.ReadRoster(filepath.Join(dir, "roster.json"))
	grants, _ := r.Grants(trust.RunPolicy(r, true))
	if !strings.HasSuffix(out, trust.AuthorizationBlock("sc", grants)) {
		t.Fatalf("printed block differs from trust.AuthorizationBlock:\n%s", out)
	}
	// The server takes nothing larger than the run's largest message.
	if want := fmt.Sprintf("\nmax_payload: %d\n", run.RosterMaxMessage(r)); !strings.Contains(out, want) {
		t.Errorf("the configuration lacks %q:\n%s", want, out[:min(len(out), 200)])
	}
	for _, want := range []string{"authorization {", "$JS.API.STREAM.CREATE.ASYREVEL_sc", r.Party(2).PublicKey, "_INBOX.sc.party-2.>",
		"$JS.API.CONSUMER.CREATE.ASYREVEL_sc.aggregator-join_1.asyrevel.sc.join.*", "$JS.API.STREAM.INFO.ASYREVEL_sc",
		"$JS.API.CONSUMER.CREATE.ASYREVEL_sc.party-2-reply.asyrevel.sc.reply.2", "$JS.ACK.ASYREVEL_sc.party-2-reply.>"} {
		if !strings.Contains(out, want) {
			t.Errorf("block lacks %q", want)
		}
	}
	// Every party's consumer has its one filter in the create subject: a
	// create without one would let the consumer read anything.
	for _, g := range grants {
		for _, s := range g.Publish {
			if c, ok := strings.CutPrefix(s, "$JS.API.CONSUMER.CREATE."); ok && g.ID != "aggregator" &&
				(strings.Count(c, ".") < 3 || !strings.HasPrefix(strings.SplitN(c, ".", 3)[2], "asyrevel.sc.") || strings.HasSuffix(c, ">")) {
				t.Errorf("%s may create a consumer without its own filter: %s", g.ID, s)
			}
		}
	}
	_, out, _ = runCLI(t, "keys", "server-config", "--no-stream-create", "--stream", "OTHER", filepath.Join(dir, "roster.json"))
	if strings.Contains(out, "STREAM.CREATE") || !strings.Contains(out, "CONSUMER.CREATE.OTHER.") {
		t.Fatalf("--no-stream-create --stream OTHER:\n%s", out)
	}
}

func TestKeysErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seed := filepath.Join(dir, "party-1.nk")
	if code, _, errOut := runCLI(t, "keys", "--id", "party-1", "--out", seed); code != 0 {
		t.Fatal(errOut)
	}
	loose := filepath.Join(dir, "loose.nk")
	data, _ := os.ReadFile(seed)
	os.WriteFile(loose, data, 0o644)
	_, pub, _ := runCLI(t, "keys", "public", seed)
	pub = strings.TrimSpace(pub)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"keys"}, 2, "--out is required"},
		{[]string{"keys", "--out", dir}, 2, "--run and --parties"},
		{[]string{"keys", "--run", "r", "--out", dir}, 2, "--run and --parties"},
		{[]string{"keys", "--run", "a.b", "--parties", "2", "--out", dir}, 2, "run id"},
		{[]string{"keys", "--run", "r", "--parties", "0", "--out", dir}, 2, "--run and --parties"},
		{[]string{"keys", "--run", "r", "--parties", "5000", "--out", dir}, 2, "1..1024"},
		{[]string{"keys", "--run", "r", "--parties", "2", "--id", "party-1", "--out", dir}, 2, "one or the other"},
		{[]string{"keys", "--id", "bob", "--out", filepath.Join(dir, "b.nk")}, 2, "party-1"},
		{[]string{"keys", "--id", "party-01", "--out", filepath.Join(dir, "b.nk")}, 2, "bad participant id"},
		{[]string{"keys", "--id", "party-1", "--out", seed}, 1, "--force"},
		{[]string{"keys", "--id", "party-1", "--out", dir}, 2, "is a folder"},
		{[]string{"keys", "frobnicate"}, 2, "unknown keys subcommand"},
		{[]string{"keys", "--bogus"}, 2, "bogus"},
		{[]string{"keys", "public"}, 2, "one key FILE"},
		{[]string{"keys", "public", loose}, 1, "chmod 600"},
		{[]string{"keys", "public", filepath.Join(dir, "missing.nk")}, 1, "no such file"},
		{[]string{"keys", "roster", "--out", filepath.Join(dir, "r.json"), "aggregator=" + pub}, 2, "--run and --out"},
		{[]string{"keys", "roster", "--run", "r", "--out", filepath.Join(dir, "r.json"), "aggregator=" + pub}, 2, "every party"},
		{[]string{"keys", "roster", "--run", "r", "--out", filepath.Join(dir, "r.json"), "aggregator=" + pub, "party-1"}, 2, "ID=KEY"},
		{[]string{"keys", "roster", "--run", "r", "--out", filepath.Join(dir, "r.json"), "aggregator=" + pub, "bob=" + pub}, 2, "bad participant id"},
		{[]string{"keys", "roster", "--run", "r", "--out", filepath.Join(dir, "r.json"), "aggregator=" + pub, "party-1=" + pub}, 1, "same public key"},
		{[]string{"keys", "roster", "--run", "r", "--out", filepath.Join(dir, "r.json"), "aggregator=" + pub, "party-1=@" + seed}, 1, "secret seed"},
		{[]string{"keys", "roster", "--run", "r", "--out", filepath.Join(dir, "r.json"), "aggregator=" + pub, "party-1=" + strings.TrimSpace(string(data))}, 1, "secret seed"},
		{[]string{"keys", "roster", "--run", "r", "--out", filepath.Join(dir, "r.json"), "aggregator=" + pub, "party-2=UABC"}, 1, "not a valid user public key"},
		{[]string{"keys", "roster", "--run", "r", "--out", filepath.Join(dir, "r.json"), "party-1=" + pub, "party-2=@" + filepath.Join(dir, "none")}, 1, "no such file"},
		{[]string{"keys", "server-config"}, 2, "one ROSTER"},
		{[]string{"keys", "server-config", seed}, 1, "roster"},
	}
	for _, tc := range cases {
		code, out, errOut := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("%v: exit %d, want %d; output %q does not mention %q", tc.args, code, tc.code, out+errOut, tc.want)
		}
		if strings.Contains(out+errOut, strings.TrimSpace(string(data))) {
			t.Errorf("%v: output shows the secret seed", tc.args)
		}
	}
}

func TestKeysHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args      []string
		want, not []string
	}{
		{[]string{"keys", "--help"}, []string{"-run", "-parties", "-id", "-out", "-force"}, []string{"-stream"}},
		{[]string{"keys", "roster", "--help"}, []string{"-run", "-out", "-force", "ID=KEY"}, []string{"-parties", "-id", "-stream"}},
		{[]string{"keys", "server-config", "--help"}, []string{"-stream", "-no-stream-create"}, []string{"-parties", "-out", "-force", "-run"}},
		{[]string{"keys", "public", "--help"}, []string{"keys public FILE"}, []string{"-parties", "-out"}},
		{[]string{"keys", "help"}, []string{"keys roster", "server-config", "keys public"}, nil},
		{[]string{"help", "keys"}, []string{"-parties"}, nil},
	} {
		code, out, errOut := runCLI(t, tc.args...)
		text := out + errOut
		if code != 0 {
			t.Errorf("%v: exit %d", tc.args, code)
		}
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("%v: help lacks %q", tc.args, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(text, "\n  "+n+" ") || strings.Contains(text, "\n  "+n+"\n") { // the flag list
				t.Errorf("%v: help lists %q, a flag it does not use", tc.args, n)
			}
		}
	}
	if _, out, _ := runCLI(t, "help"); !strings.Contains(out, "asyrevel keys") {
		t.Error("usage does not mention keys")
	}
}
