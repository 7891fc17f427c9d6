package cli

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/align"
	"github.com/asyrevel/asyrevel/dataset"
)

// TestAlignOrganisationsThenTrain is a deployment's alignment: three
// organisations run asyrevel align each on its own (as goroutines of the
// command line, each with its own connection and key) over one broker
// that admits only the run's roster; each writes a folder of its own,
// which data verify checks alone and against the others' from digests;
// then an aggregator and two party processes of the same run train on the
// folders as they are. The test accuracy equals, within 0.05, that of the
// same rows aligned in the clear (in the same order, the same holdout)
// and trained in one process.
func TestAlignOrganisationsThenTrain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	paths, feats, labels := alignInputs(t, dir, 2400)
	const run = "orgs"
	keys := filepath.Join(dir, "keys")
	if code, _, e := runCLI(t, "keys", "--run", run, "--parties", "2", "--out", keys); code != 0 {
		t.Fatalf("keys: %s", e)
	}
	roster := filepath.Join(keys, "roster.json")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	bctx, stop := context.WithCancel(ctx)
	brk := goCLI(bctx, "broker", "--roster", roster, "--port", strconv.Itoa(port), "--store", filepath.Join(dir, "store"))
	defer stop()
	waitPort(t, port)

	names := []string{"aggregator", "party-1", "party-2"}
	outs := make([]string, 3)
	var aligns []<-chan result
	// The parties first: they wait for the run's stream, which the hub
	// makes.
	for _, m := range []int{2, 1, 0} {
		outs[m] = filepath.Join(dir, "org-"+names[m])
		args := []string{"align", "--nats", url, "--run", run, "--id", strconv.Itoa(m), "--nkey", filepath.Join(keys, names[m]+".nk"),
			"--roster", roster, "--data", paths[m], "--key", "id", "--out", outs[m], "--progress", "0", "--timeout", "90s"}
		if m == 0 {
			args = append(args, "--label", "y")
		}
		aligns = append(aligns, goCLI(ctx, args...))
	}
	for i, ch := range aligns {
		if r := <-ch; r.code != 0 || !strings.Contains(r.out, "rows in common") {
			t.Fatalf("align of %s: exit %d: %s%s", names[2-i], r.code, r.out, r.errOut)
		}
	}
	// Each folder holds its organisation's file only.
	for m, o := range outs {
		want := dataset.LabelsFileName("train")
		if m > 0 {
			want = dataset.PartyFileName(m, "train")
		}
		man, err := dataset.ReadManifest(o)
		if err != nil || len(man.Files) != 1 || man.Files[0].Name != want || man.Q != 2 || man.Features != 10 || man.Classes != 2 {
			t.Fatalf("%s's manifest: %+v, %v", names[m], man, err)
		}
		entries, _ := os.ReadDir(o)
		want3 := 3
		if m == 0 {
			want3 = 4 // and the label holder's keys as written
		}
		if len(entries) != want3 {
			t.Errorf("%s's folder holds %d files, want its own, %s and %s (the label holder's %s too)", names[m], len(entries), dataset.ManifestFile, align.RecordFile, align.KeysFile)
		}
	}
	if code, o, e := runCLI(t, "data", "verify", outs[1]); code != 0 || !strings.Contains(o, "one organisation's folder") {
		t.Fatalf("data verify of one folder: exit %d: %s%s", code, o, e)
	}
	if code, o, e := runCLI(t, "data", "verify", outs[0], outs[1], filepath.Join(outs[2], align.RecordFile)); code != 0 || !strings.Contains(o, "3 organisations agree on the order") {
		t.Fatalf("data verify of the folders: exit %d: %s%s", code, o, e)
	}

	// A folder of one organisation is not a whole run's data, nor
	// another organisation's.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--data", outs[0], "--parties", "2"}, "holds no training file of party 1 (it holds [labels.train.gz]"},
		{[]string{"train", "--data", outs[1], "--parties", "2"}, "holds no training labels (it holds [party-1.train.gz]"},
		{[]string{"party", "--id", "2", "--data", outs[1], "--parties", "2", "--nats", url, "--run", run, "--roster", roster, "--key", filepath.Join(keys, "party-2.nk")},
			"holds no training file of party 2"},
		{[]string{"aggregator", "--data", outs[1], "--parties", "2", "--nats", url, "--run", run, "--roster", roster, "--key", filepath.Join(keys, "aggregator.nk")},
			"holds no training labels"},
	} {
		if code, _, e := runCLI(t, c.args...); code == 0 || !strings.Contains(e, c.want) {
			t.Errorf("%v: exit %d: %s; want %q", c.args[:3], code, e, c.want)
		}
	}
	// Training on the folders as they are, in the same run (its keys,
	// roster and broker), and on the same rows aligned in the clear.
	common := []string{"--nats", url, "--run", run, "--parties", "2", "--roster", roster, "--log", "warn",
		"--batch", "8", "--holdout", "0.25", "--seed", "1", "--privacy", "off"}
	var ps []<-chan result
	for m := 1; m <= 2; m++ {
		ps = append(ps, goCLI(ctx, append([]string{"party", "--id", strconv.Itoa(m), "--key", filepath.Join(keys, names[m]+".nk"), "--data", outs[m]}, common...)...))
	}
	aggOut := filepath.Join(dir, "train-orgs")
	agg := <-goCLI(ctx, append([]string{"aggregator", "--key", filepath.Join(keys, "aggregator.nk"), "--data", outs[0], "--epochs", "20", "--out", aggOut}, common...)...)
	if agg.code != 0 {
		t.Fatalf("aggregator: exit %d: %s", agg.code, agg.errOut)
	}
	for m, p := range ps {
		if r := <-p; r.code != 0 {
			t.Fatalf("party %d: exit %d: %s", m+1, r.code, r.errOut)
		}
	}
	// The alignment and the training are one audited log.
	stop()
	<-brk
	if code, o, e := runCLI(t, "audit", "verify", "--store", filepath.Join(dir, "store"), "--run", run, "--roster", roster); code != 0 ||
		!strings.Contains(o, "verdict: intact") || !strings.Contains(o, "party-2      psi") {
		t.Fatalf("audit verify: exit %d: %s%s", code, o, e)
	}
	hub, err := dataset.LoadLabels(filepath.Join(outs[0], dataset.LabelsFileName("train")))
	if err != nil {
		t.Fatal(err)
	}
	// The clear alignment: the rows every file holds, looked up by the
	// plain key, in the order the organisations agreed on.
	clear := &dataset.Dataset{Name: "clear", Format: "csv", Classes: 2, LabelValues: []float64{0, 1}, IDs: hub.IDs,
		X: &dataset.Matrix{NRows: len(hub.IDs), NCols: 10, Indptr: []int64{0}}, Y: make([]int32, len(hub.IDs))}
	for i, id := range hub.IDs {
		x, ok := feats[strings.ToUpper(id)]
		if !ok {
			t.Fatalf("aligned id %s is no customer's", id)
		}
		for j, v := range x {
			if v != 0 {
				clear.X.Indices = append(clear.X.Indices, int32(j))
				clear.X.Values = append(clear.X.Values, float32(v))
			}
		}
		clear.X.Indptr = append(clear.X.Indptr, int64(len(clear.X.Indices)))
		clear.Y[i] = int32(labels[strings.ToUpper(id)])
		if hub.Y[i] != clear.Y[i] {
			t.Fatalf("row %s: the hub's label %d, the customer's %d", id, hub.Y[i], clear.Y[i])
		}
	}
	clearDir := filepath.Join(dir, "clear")
	if _, err := dataset.WriteSplitBlocks(clearDir, []dataset.Block{{Lo: 0, Hi: 5}, {Lo: 5, Hi: 10}}, clear, nil, dataset.SplitSource{}); err != nil {
		t.Fatal(err)
	}
	clearOut := filepath.Join(dir, "train-clear")
	if code, _, e := runCLI(t, "train", "--data", clearDir, "--parties", "2", "--epochs", "20", "--batch", "8", "--holdout", "0.25", "--seed", "1",
		"--privacy", "off", "--log", "warn", "--out", clearOut); code != 0 {
		t.Fatalf("train in the clear: exit %d: %s", code, e)
	}
	acc := map[string]float64{}
	for name, o := range map[string]string{"orgs": aggOut, "clear": clearOut} {
		var s struct {
			TestAccuracy float64 `json:"test_accuracy"`
			Test         int     `json:"test_samples"`
		}
		if raw, err := readSummary(o, &s); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
		acc[name] = s.TestAccuracy
	}
	t.Logf("test accuracy: three organisations' folders %.3f, the same rows aligned in the clear %.3f (%d rows)", acc["orgs"], acc["clear"], len(hub.IDs))
	if acc["orgs"] < 0.8 || acc["clear"] < 0.8 || math.Abs(acc["orgs"]-acc["clear"]) > 0.05 {
		t.Fatalf("test accuracy: the organisations' folders %.3f, in the clear %.3f", acc["orgs"], acc["clear"])
	}
}
