package run

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyrevel/asyrevel/dataset"
)

func writeSplit(t *testing.T, q int, seed uint64) string {
	t.Helper()
	cfg := *small()
	cfg.Seed = seed
	tr, te, err := dataset.Synthetic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := dataset.WriteSplit(dir, q, tr, te, dataset.SplitSource{Train: "synthetic"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadSplitRoles(t *testing.T) {
	dir := writeSplit(t, 3, 3)
	cfg := New(func(c *Config) {
		c.Data = dir
		c.Parties = 3
	})
	all, err := LoadData(&cfg, RoleAll)
	if err != nil {
		t.Fatal(err)
	}
	if all.NTrain != 4000 || all.NTest != 1000 || len(all.TrainY) != 4000 || all.PartTrain[2] == nil || all.PartTest[0] == nil {
		t.Fatalf("whole split: %+v", all)
	}
	agg, err := LoadData(&cfg, RoleAggregator)
	if err != nil {
		t.Fatal(err)
	}
	if len(agg.TrainY) != 4000 || agg.PartTrain[0] != nil || agg.IDHash == "" || agg.IDHash != all.IDHash {
		t.Fatalf("aggregator's part: labels %d, party matrix %v, id hash %q", len(agg.TrainY), agg.PartTrain[0], agg.IDHash)
	}
	p2, err := LoadData(&cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	if p2.TrainY != nil || p2.PartTrain[0] != nil || p2.PartTrain[1] == nil || p2.IDHash != agg.IDHash {
		t.Fatalf("party 2's part holds labels %v, party 1's matrix %v, its own %v", p2.TrainY != nil, p2.PartTrain[0] != nil, p2.PartTrain[1] != nil)
	}
	cfg.Parties = 4
	if _, err := LoadData(&cfg, RoleAll); err == nil || !strings.Contains(err.Error(), "split for 3 parties") {
		t.Fatalf("wrong party count: %v", err)
	}
}

func TestSplitTrainsAndMismatchIsNamed(t *testing.T) {
	if testing.Short() {
		t.Skip("short: whole runs on split folders")
	}
	dir := writeSplit(t, 3, 3)
	s, err := Train(context.Background(), New(func(c *Config) {
		c.Data = dir
		c.Parties = 3
		c.Bus = "memory"
		c.Batch = 16
		c.Window = 2
		c.Epochs = 20
	}), Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if s.TestAccuracy < 0.9 {
		t.Errorf("split folder run: accuracy %.4f", s.TestAccuracy)
	}
	// Swap in party 2's file of a split with other sample ids (shuffled rows).
	other := writeSplit(t, 3, 4)
	cfg := *small()
	cfg.Seed = 3
	tr, te, _ := dataset.Synthetic(cfg)
	rows := make([]int, tr.Len())
	for i := range rows {
		rows[i] = (i + 1) % tr.Len()
	}
	shuffled := tr.Subset(rows)
	if _, err := dataset.WriteSplit(other, 3, shuffled, te, dataset.SplitSource{}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(other, dataset.PartyFileName(2, "train")))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, dataset.PartyFileName(2, "train")), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = LoadData(new(New(func(c *Config) {
		c.Data = dir
		c.Parties = 3
	})), RoleAll)
	if !errors.Is(err, dataset.ErrChecksum) {
		t.Fatalf("a file that is not the manifest's: %v", err)
	}
	// With the manifest updated to the new file, the ids themselves disagree.
	man, err := dataset.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	om, _ := dataset.ReadManifest(other)
	e2, _ := om.File("train", 2)
	for i, e := range man.Files {
		if e.Name == e2.Name {
			man.Files[i] = e2
		}
	}
	js, _ := json.Marshal(man)
	if err := os.WriteFile(filepath.Join(dir, dataset.ManifestFile), js, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = LoadData(new(New(func(c *Config) {
		c.Data = dir
		c.Parties = 3
	})), RoleAll)
	if !errors.Is(err, dataset.ErrMismatch) || !strings.Contains(err.Error(), "sample 1") {
		t.Fatalf("misaligned party file: %v", err)
	}
}
