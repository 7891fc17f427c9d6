package run

import (
	"reflect"
	"testing"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/schemas"
)

// A party in a process of its own, given no --holdout, loads its rows with
// none kept aside; split by the aggregator's call, they are the rows (and
// the scaling, fitted on the rows trained on) a process loading them with
// that hold-out would hold, chosen by the aggregator's seed, not the
// party's own; its data and the hold-out it describes follow.
func TestPartyResplitIsTheLoadWithTheHoldOut(t *testing.T) {
	cfg := &job{Config: New(func(c *Config) {
		c.Synthetic = &dataset.SyntheticConfig{Samples: 300, TestSamples: 50, Features: 12, Classes: 2, Noise: 0.3, Seed: 11}
		c.Parties, c.Scale, c.HoldOut, c.Seed = 2, dataset.ScaleStandard, -1, 5
	})}
	data, err := loadData(cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	if h := partyHoldOut(cfg, data, 2); h.HoldOut.Rows() || h.Given || h.Resplit != nil {
		t.Fatalf("before the call: %+v", h)
	}
	cfg.resplit = resplitter(cfg, data)
	call := schemas.HoldOut{Share: 0.1, Seed: 7} // the aggregator's --seed 7
	rows, err := partyHoldOut(cfg, data, 2).Resplit(call)
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.dataOptions()
	o.HoldOut, o.Seed = 0.1, 7
	want, err := dataset.LoadVertical(o, 2)
	if err != nil {
		t.Fatal(err)
	}
	if rows.HeldOut != 30 || rows.Train.NRows != 270 || rows.Test.NRows != 80 {
		t.Fatalf("%d rows kept aside, %d trained on, %d test: want 30, 270 and 80", rows.HeldOut, rows.Train.NRows, rows.Test.NRows)
	}
	if !reflect.DeepEqual(rows.Train, want.PartTrain[1]) || !reflect.DeepEqual(rows.Test, want.PartTest[1]) || !reflect.DeepEqual(data.Scalers, want.Scalers) {
		t.Error("the rows split by the call are not those loaded with its hold-out")
	}
	if rows.LR != cfg.Schedule(270) {
		t.Errorf("step sizes %v, want %v (their decay scales with the rows trained on)", rows.LR, cfg.Schedule(270))
	}
	if h := partyHoldOut(cfg, data, 2); h.HoldOut != call || h.HeldOut != 30 || data.NTrain != 270 {
		t.Errorf("after the call the party describes %+v (%d rows) of %d training rows", h.HoldOut, h.HeldOut, data.NTrain)
	}
}
