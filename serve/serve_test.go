package serve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/serve"
	"github.com/asyrevel/asyrevel/trust"
)

const testRun = "servetest"

// fixture writes a small LIBSVM file (6 features, 2 parties of 3) and the
// models of a run over it into dir; with keys, signed, and the keys in
// dir/keys. It returns the data file and the models folder.
func fixture(t testing.TB, dir string, keys bool) (data, models string) {
	t.Helper()
	data = filepath.Join(dir, "rows.libsvm")
	var b strings.Builder
	for i := range 40 {
		label := "-1"
		if i%3 == 0 {
			label = "+1"
		}
		fmt.Fprintf(&b, "%s 1:%d 2:%g 4:%d 6:%g\n", label, i%5, float64(i)/10, i%2, math.Sin(float64(i)))
	}
	if err := os.WriteFile(data, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	read := serve.ReadSpec{Format: dataset.FormatLIBSVM, Features: 6}
	sc := &dataset.Scaler{Method: dataset.ScaleStandard, Shift: []float64{0.5, 0, 0}, Factor: []float64{2, 1, 0.5}}
	files := []*serve.File{
		{Run: testRun, Role: serve.RoleAggregator, Parties: 2, Kind: serve.KindLogisticBias, In: 2, Out: 2, K: 1, Params: []float64{-0.2},
			Read: read, Labels: &serve.LabelsSpec{Classes: 2, Values: []float64{-1, 1}}},
		{Run: testRun, Role: serve.RoleParty, Party: 1, Parties: 2, Kind: serve.KindLinear, In: 3, Out: 1, K: 1, Params: []float64{0.3, -0.7, 1.1},
			Read: read, Columns: &serve.Columns{Lo: 0, Hi: 3, Scaler: sc}},
		{Run: testRun, Role: serve.RoleParty, Party: 2, Parties: 2, Kind: serve.KindLinear, In: 3, Out: 1, K: 1, Params: []float64{-0.4, 0.9, 0.25},
			Read: read, Columns: &serve.Columns{Lo: 3, Hi: 6}},
	}
	models = filepath.Join(dir, "models")
	if keys {
		r, ks, err := trust.GenerateRun(testRun, 2)
		if err != nil {
			t.Fatal(err)
		}
		kd := filepath.Join(dir, "keys")
		os.MkdirAll(kd, 0o700)
		if err := r.WriteFile(filepath.Join(kd, "roster.json"), true); err != nil {
			t.Fatal(err)
		}
		for m, k := range ks {
			id := trust.AggregatorID
			if m > 0 {
				id = trust.PartyID(m)
			}
			if err := trust.WriteKeyFile(filepath.Join(kd, id+".nk"), k, true); err != nil {
				t.Fatal(err)
			}
			if err := files[m].Sign(k); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, f := range files {
		if _, err := f.Write(models); err != nil {
			t.Fatal(err)
		}
	}
	return data, models
}

// reference computes the predictions of the fixture's models directly.
func reference(t *testing.T, data string) (classes []int32, p1 []float64) {
	ds, err := dataset.Open(data, dataset.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := []float64{0.3, -0.7, 1.1, -0.4, 0.9, 0.25}
	shift := []float64{0.5, 0, 0, 0, 0, 0}
	factor := []float64{2, 1, 0.5, 1, 1, 1}
	for i := range ds.Len() {
		idx, val := ds.X.Row(i)
		z := -0.2
		for k, j := range idx {
			z += w[j] * float64(float32((float64(val[k])-shift[j])*factor[j]))
		}
		// Column 0 is centred: its zeros become -0.5*2.
		if len(idx) == 0 || idx[0] != 0 {
			z += w[0] * float64(float32((0-shift[0])*factor[0]))
		}
		p := 1 / (1 + math.Exp(-z))
		c := int32(0)
		if z > 0 {
			c = 1
		}
		classes, p1 = append(classes, c), append(p1, p)
	}
	return classes, p1
}

func TestPredictMatchesDirectComputation(t *testing.T) {
	for _, tc := range []struct {
		name string
		bus  string
		keys bool
	}{{"memory, unsigned", "memory", false}, {"jetstream, signed", "jetstream", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			data, models := fixture(t, dir, tc.keys)
			out := filepath.Join(dir, "predictions.csv")
			m, err := serve.Predict(context.Background(), serve.PredictConfig{Models: models, Data: data, Out: out, Chunk: 7, Net: serve.NetConfig{Bus: tc.bus}, TrustUnsigned: !tc.keys, Log: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			classes, p1 := reference(t, data)
			if m.Rows != 40 || !m.Labelled || m.Signed != tc.keys {
				t.Fatalf("metrics %+v", m)
			}
			correct := 0
			for i, p := range m.Predictions {
				if p.Class != classes[i] || math.Abs(p.Probs[1]-p1[i]) > 1e-12 || math.Abs(p.Probs[0]+p.Probs[1]-1) > 1e-12 {
					t.Errorf("row %d: %+v, want class %d, p1 %v", i, p, classes[i], p1[i])
				}
				if classes[i] == m.Y[i] {
					correct++
				}
			}
			if m.Accuracy != float64(correct)/40 {
				t.Errorf("accuracy %v, want %v", m.Accuracy, float64(correct)/40)
			}
			csv, _ := os.ReadFile(out)
			lines := strings.Split(strings.TrimSpace(string(csv)), "\n")
			if len(lines) != 41 || lines[0] != "id,label,predicted,p_-1,p_1" || !strings.HasPrefix(lines[1], "0,") || !strings.HasPrefix(lines[40], "39,") {
				t.Fatalf("predictions.csv: %q ... %q (%d lines)", lines[0], lines[len(lines)-1], len(lines))
			}
			// label: the data's own label; predicted: the model's.
			text := map[int32]string{0: "-1", 1: "1"}
			for i := range 40 {
				if want := fmt.Sprintf("%d,%s,%s,", i, text[m.Y[i]], text[classes[i]]); !strings.HasPrefix(lines[i+1], want) {
					t.Errorf("predictions.csv line %d: %q, want %q...", i+2, lines[i+1], want)
				}
			}
		})
	}
}

func TestModelFileRefusals(t *testing.T) {
	dir := t.TempDir()
	_, models := fixture(t, dir, true)
	good, err := os.ReadFile(filepath.Join(models, "party-1.model"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := serve.Unmarshal(good); err != nil {
		t.Fatalf("a good file: %v", err)
	}
	f, _ := serve.Unmarshal(good)
	nan := *f
	nan.Params = []float64{math.NaN(), 0, 0}
	wrongShape := *f
	wrongShape.Params = []float64{1, 2}
	unknownKind := *f
	unknownKind.Kind = "forest"
	cases := []struct {
		name string
		data func() []byte
		want error
	}{
		{"not a model", func() []byte { return []byte("hello") }, serve.ErrFormat},
		{"truncated", func() []byte { return good[:len(good)/2] }, serve.ErrFormat},
		{"a changed parameter", func() []byte {
			b := bytes.Clone(good)
			i := bytes.Index(b, []byte("params"))
			b[i+9] ^= 1 // inside the first float64
			return b
		}, serve.ErrSignature},
		{"another version", func() []byte {
			return bytes.Replace(good, append([]byte("version"), 1), append([]byte("version"), 9), 1)
		}, serve.ErrFormat},
		{"NaN parameter", func() []byte { b, _ := nan.Marshal(); return b }, serve.ErrFormat},
		{"wrong number of parameters", func() []byte { b, _ := wrongShape.Marshal(); return b }, serve.ErrFormat},
		{"unknown kind", func() []byte { b, _ := unknownKind.Marshal(); return b }, serve.ErrFormat},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := serve.Unmarshal(tc.data()); !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
	// Signed by another key than the roster's party-1: refused with the roster.
	keys, err := serve.LoadKeys(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	g := *f
	if err := g.Sign(keys.Key(2)); err != nil {
		t.Fatal(err)
	}
	if err := g.CheckSigner(keys.Roster); !errors.Is(err, serve.ErrSignature) {
		t.Errorf("party-1's model signed by party-2: %v", err)
	}
	// A party model of another run in the folder.
	h := *f
	h.Run, h.Signer, h.Sig = "otherrun", "", nil
	if _, err := h.Write(models); err != nil {
		t.Fatal(err)
	}
	if _, err := serve.LoadSet(models, nil); !errors.Is(err, serve.ErrMismatch) {
		t.Errorf("a model of another run: %v", err)
	}
}

func TestDataMismatch(t *testing.T) {
	dir := t.TempDir()
	_, models := fixture(t, dir, false)
	wide := filepath.Join(dir, "wide.libsvm")
	os.WriteFile(wide, []byte("+1 1:1 9:2\n"), 0o644)
	nan := filepath.Join(dir, "nan.libsvm")
	os.WriteFile(nan, []byte("+1 1:nan\n"), 0o644)
	for _, path := range []string{wide, nan, filepath.Join(dir, "missing")} {
		out := filepath.Join(dir, "p.csv")
		if _, err := serve.Predict(context.Background(), serve.PredictConfig{Models: models, Data: path, Out: out, Net: serve.NetConfig{Bus: "memory"}, TrustUnsigned: true, Log: zerolog.Nop()}); err == nil {
			t.Errorf("%s: no error", path)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: predictions written", path)
		}
	}
}

// patientClient bounds a request by a long timeout: an answer must come,
// and a busy machine (CI shares two cores) must never reach it; it only
// keeps a service that hangs from running into the suite's -timeout.
var patientClient = &http.Client{Timeout: 3 * time.Minute}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := patientClient.Post(url+"/v1/predict", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The service on an embedded JetStream broker, over real HTTP: answers,
// 404 naming the organisation, 400, a killed party gives 503 within the
// timeout and the service recovers when it returns.
func TestServiceOverHTTP(t *testing.T) {
	dir := t.TempDir()
	data, models := fixture(t, dir, true)
	ctx := context.Background()
	// Every call must be answered within the timeout but the one party 2
	// misses: 1 s, not 300 ms, on a busy host. No idle seal: one sent
	// while party 2 is away times out too, and the counts below would
	// have a third timeout (a busy host that held the test 200 ms
	// between two calls sent one).
	d, err := serve.Deploy(ctx, serve.DeployConfig{Models: models, Data: data, Timeout: time.Second, SealIdle: -1, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	svc := serve.NewService(serve.ServiceConfig{Scorer: d.Scorer, Labels: d.Set.Aggregator.Labels, Probe: d.IDs[0], MaxIDs: 10, InsecureNoAuth: true}) // the clients: TestServiceAuth
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	classes, p1 := reference(t, data)

	code, body := post(t, srv.URL, `{"ids": [3, "17"]}`)
	var resp serve.PredictResponse
	if code != 200 || json.Unmarshal([]byte(body), &resp) != nil || len(resp.Predictions) != 2 {
		t.Fatalf("%d %s", code, body)
	}
	for k, i := range []int{3, 17} {
		p := resp.Predictions[k]
		want := []float64{-1, 1}[classes[i]]
		if p.ID != fmt.Sprint(i) || p.Label != want || math.Abs(p.Probabilities[1]-p1[i]) > 1e-12 {
			t.Errorf("id %d: %+v, want label %v p1 %v", i, p, want, p1[i])
		}
	}
	for _, tc := range []struct {
		body string
		code int
		has  string
	}{
		{`{"ids": ["nobody"]}`, 404, "party-1 lacks"},
		{`{"ids": [`, 400, "malformed"},
		{`{"ids": []}`, 400, "give 1 to 10"},
		{`{"ids": [1,2,3,4,5,6,7,8,9,10,11]}`, 400, "give 1 to 10"},
		{`{"ids": [1.5]}`, 400, "neither"},
		{`{"idz": [1]}`, 400, "unknown field"},
	} {
		if code, body := post(t, srv.URL, tc.body); code != tc.code || !strings.Contains(body, tc.has) {
			t.Errorf("%s: %d %s, want %d with %q", tc.body, code, body, tc.code, tc.has)
		}
	}

	// Party 2 goes away (its connection closes, as when its process is
	// killed): 503 naming it, from the service's 1 s timeout (a request
	// that waited on the party forever would not be answered: post's
	// client gives up after minutes and fails the test).
	d.Parties[1].Close()
	t0 := time.Now()
	code, body = post(t, srv.URL, `{"ids": [1]}`)
	if code != 503 || !strings.Contains(body, "party-2") {
		t.Errorf("party down: %d %s after %v", code, body, time.Since(t0))
	}
	if resp, err := http.Get(srv.URL + "/healthz"); err != nil || resp.StatusCode != 503 {
		t.Errorf("healthz with a party down: %v %v", resp.StatusCode, err)
	}
	// It comes back: the service answers again.
	b, err := d.Net.Connect(ctx, "party-2-again", d.Keys.Key(2))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sub, err := d.Responders[1].Subscribe(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if code, body := post(t, srv.URL, `{"ids": [1]}`); code != 200 {
		t.Errorf("after the party returned: %d %s", code, body)
	}
	mresp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{`asyrevel_serve_requests_total{code="200"} 2`, `asyrevel_serve_requests_total{code="503"} 2`, "asyrevel_serve_party_timeouts_total 2", `asyrevel_serve_predict_seconds_count 2`} {
		if !strings.Contains(string(mb), want) {
			t.Errorf("metrics lack %q:\n%s", want, mb)
		}
	}
}

// Forged, replayed and malformed requests are rejected and counted by the
// party; a party can refuse ids outside its allowed list.
func TestResponderRejects(t *testing.T) {
	dir := t.TempDir()
	data, models := fixture(t, dir, true)
	keys, err := serve.LoadKeys(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := serve.LoadSet(models, keys.Roster)
	if err != nil {
		t.Fatal(err)
	}
	rows, _, err := serve.ReadAll(data, set, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	hub := broker.NewMemoryHub()
	r, err := serve.NewResponder(ctx, serve.ResponderConfig{Model: set.Parties[0], Rows: rows[0], Key: keys.Key(1), Roster: keys.Roster,
		Allowed: map[string]bool{"1": true, "2": true}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pb := hub.Connect("party-1")
	if _, err := r.Subscribe(ctx, pb); err != nil {
		t.Fatal(err)
	}
	// Party 2 is absent, so each call below lasts the timeout: party 1's
	// answer (or refusal) must come within it. At 200 ms a busy host
	// could miss it (ErrPartyDown instead of ErrRefused). No idle seal:
	// it adds a signed request of its own once the chain sits unsigned
	// for SealIdle, which a busy host reached between the two calls.
	sc, err := serve.NewScorer(serve.ScorerConfig{Model: set.Aggregator, Key: keys.Key(0), Roster: keys.Roster, Timeout: time.Second, SealIdle: -1})
	if err != nil {
		t.Fatal(err)
	}
	ab := hub.Connect("aggregator")
	if err := sc.Start(ctx, ab); err != nil {
		t.Fatal(err)
	}
	// A rogue on the bus (the memory hub has no permissions) records the
	// requests.
	rogue := hub.Connect("rogue")
	var seen []broker.Message
	var seenMu sync.Mutex
	rsub, err := rogue.Subscribe(ctx, []string{schemas.ScoreSubject(testRun)}, broker.SubscribeOptions{Deliver: broker.DeliverNew}, func(_ context.Context, d broker.Delivery) {
		seenMu.Lock()
		defer seenMu.Unlock()
		seen = append(seen, broker.Message{Subject: d.Subject(), Data: bytes.Clone(d.Data()),
			Header: map[string]string{trust.SigHeader: d.Header(trust.SigHeader), trust.PrevHeader: d.Header(trust.PrevHeader)}})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rsub.Close()
	// Party 2 is absent: every request times out, but party 1 answers
	// (or refuses).
	if _, err := sc.Score(ctx, []string{"1"}); !errors.Is(err, serve.ErrPartyDown) || !strings.Contains(err.Error(), "party-2") {
		t.Errorf("party 2 absent: %v", err)
	}
	if _, err := sc.Score(ctx, []string{"5"}); !errors.Is(err, serve.ErrRefused) {
		t.Errorf("an id outside the allowed list: %v", err)
	}
	// The rogue's subscription gets the requests beside the party: wait
	// for both.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) { // a bound on a hang
		seenMu.Lock()
		n := len(seen)
		seenMu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
	}
	seenMu.Lock()
	if len(seen) != 2 || seen[0].Header[trust.SigHeader] != "" || seen[1].Header[trust.SigHeader] == "" {
		t.Fatalf("recorded %d requests, want an unsigned one and, after a party did not answer, a signed one", len(seen))
	}
	replay := seen[0]
	seenMu.Unlock()
	forged := []*broker.Message{
		{Subject: schemas.ScoreSubject(testRun), Data: []byte("x")}, // malformed
		{Subject: schemas.ScoreSubject(testRun), Data: schemas.AppendScoreRequest(nil, 3, []string{"1"}), Header: map[string]string{trust.SigHeader: "garbage-no-dot"}}, // bad signature
		&replay, // an earlier request again
		{Subject: schemas.ScoreSubject(testRun), Data: schemas.AppendScoreRequest(nil, 10, []string{"1"})}, // unsigned, beyond the chain
	}
	for _, m := range forged {
		if err := rogue.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int64{"malformed": 1, "trust-bad_signature": 1, "trust-replay": 1, "trust-gap": 1}
	deadline := time.Now().Add(3 * time.Minute) // a bound on a hang, not on speed
	for len(r.Stats().Rejected) < len(want) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	st := r.Stats()
	if !maps.Equal(st.Rejected, want) || st.Requests != 1 || st.Refused != 1 {
		t.Errorf("party stats %+v: want rejections %v, 1 answered, 1 refused", st, want)
	}
}

// The separate-process form over a broker: each party reads only its own
// model file and its rows, the aggregator its model and the ids.
func TestPredictSeparateParties(t *testing.T) {
	predictSeparate(t, false)
}

// Scoring as separate processes through a broker that admits only the
// run's roster, each participant on its own key and inbox: the scoring
// subjects are in the roster's permissions.
func TestPredictSeparatePartiesRosterBroker(t *testing.T) {
	predictSeparate(t, true)
}

// predictSeparate scores the fixture with each party a responder of its
// own on a broker (one that admits only the roster's users, with
// rosterOnly) and checks every prediction.
func predictSeparate(t *testing.T, rosterOnly bool) {
	t.Helper()
	dir := t.TempDir()
	data, models := fixture(t, dir, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	roster, err := trust.ReadRoster(filepath.Join(dir, "keys", "roster.json"))
	if err != nil {
		t.Fatal(err)
	}
	scfg := broker.ServerConfig{Dir: filepath.Join(dir, "store")}
	run := testRun
	if rosterOnly {
		grants, err := roster.Grants(trust.RunPolicy(roster, true))
		if err != nil {
			t.Fatal(err)
		}
		users := trust.NkeyUsers(grants)
		scfg.Configure = func(o *server.Options) { o.Nkeys = users }
		run = roster.Run
	}
	srv, err := broker.StartServer(ctx, scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if _, err := nats.Connect(srv.URL()); rosterOnly && err == nil {
		t.Fatal("an anonymous connection was admitted")
	}
	net, err := serve.OpenNetwork(ctx, serve.NetConfig{NATS: srv.URL(), Run: run})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	for m := 1; m <= 2; m++ {
		f, err := serve.Load(filepath.Join(models, serve.FileName(m)))
		if err != nil {
			t.Fatal(err)
		}
		keys, err := serve.PartyKeys(filepath.Join(dir, "keys", trust.PartyID(m)+".nk"), filepath.Join(dir, "keys", "roster.json"), m)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := serve.ReadParty(data, f, "")
		if err != nil {
			t.Fatal(err)
		}
		r, err := serve.NewResponder(ctx, serve.ResponderConfig{Model: f, Rows: rows, Key: keys.Key(m), Roster: keys.Roster})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var key *trust.Key
		if rosterOnly {
			key = keys.Key(m) // a party waits for the aggregator's stream: connect beside the scoring
		}
		connect := func() error {
			b, err := net.Connect(ctx, trust.PartyID(m), key)
			if err == nil {
				_, err = r.Subscribe(ctx, b)
			}
			return err
		}
		if !rosterOnly {
			if err := connect(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		go func() {
			if err := connect(); err != nil {
				t.Error(err)
			}
		}()
	}
	// Wait bounds a hang only: the parties connect beside the scoring,
	// and a busy host can take more than 10 s.
	m, err := serve.Predict(ctx, serve.PredictConfig{Models: models, Data: data, Separate: true, Wait: 2 * time.Minute,
		Net: serve.NetConfig{NATS: srv.URL()}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	classes, _ := reference(t, data)
	for i, p := range m.Predictions {
		if p.Class != classes[i] {
			t.Fatalf("row %d: class %d, want %d", i, p.Class, classes[i])
		}
	}
	if !m.Signed || m.Rows != 40 {
		t.Errorf("metrics %+v", m)
	}
}
