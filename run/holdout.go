package run

import (
	"fmt"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/schemas"
)

// The hold-out across processes. The aggregator decides which training
// rows a run keeps aside (Config.HoldOut as derived: DefaultHoldOut when
// the run stops by patience, none for a run of a given length, --holdout
// when given) and tells each party in its call (schemas.Control.HoldOut).
// A party in a process of its own (Participate) given no --holdout loads
// its rows with none kept aside and, called, loads them again split as the
// aggregator's are (the scaling fitted on the rows trained on, as in one
// process), before it answers; one given a --holdout refuses a call that
// names another. A resumed party splits its rows as its checkpoint
// records.

// rowsHoldOut is the hold-out data's rows were split by (zero: none, or
// one the run cannot name: data given split, Hooks.Loaded, with rows held
// out by a share the run was not given; parties of such a run share its
// process and its data, and a call has nothing to tell them).
func rowsHoldOut(cfg *job, data *Data) schemas.HoldOut {
	if cfg.split != nil {
		return *cfg.split
	}
	if data.HeldOut == 0 || !(cfg.HoldOut > 0) {
		return schemas.HoldOut{}
	}
	return schemas.HoldOut{Share: cfg.HoldOut, Seed: cfg.Seed}
}

// rowsHeldOut is the rows rowsHoldOut names (0 when it names none).
func rowsHeldOut(cfg *job, data *Data) int {
	if h := rowsHoldOut(cfg, data); !h.Rows() {
		return 0
	}
	return data.HeldOut
}

// partyHoldOut is party m's hold-out as its data keep it, and how it takes
// another (cfg.resplit, in a party's process).
func partyHoldOut(cfg *job, data *Data, m int) party.HoldOut {
	h := party.HoldOut{HoldOut: rowsHoldOut(cfg, data), HeldOut: data.HeldOut, Given: cfg.Explicit["holdout"]}
	if h.Given {
		h.Flags = fmt.Sprintf("--holdout %g --seed %d", max(cfg.HoldOut, 0), cfg.Seed)
		if cfg.HoldOut <= 0 {
			h.Flags = fmt.Sprintf("--holdout %g (none)", cfg.HoldOut)
		} else if data.HeldOut == 0 {
			h.Flags += " (no row of so few)"
		}
	}
	if cfg.resplit != nil {
		h.Resplit = func(to schemas.HoldOut) (party.Rows, error) { return cfg.resplit(m, to) }
	}
	return h
}

// resplitter gives the function that splits party m's rows (data, which
// it replaces with the rows split) by another hold-out: it reads them
// again as LoadData does, with that hold-out.
func resplitter(cfg *job, data *Data) func(m int, h schemas.HoldOut) (party.Rows, error) {
	return func(m int, h schemas.HoldOut) (party.Rows, error) {
		if cfg.hooks.Loaded != nil {
			return party.Rows{}, fmt.Errorf("%w: the party's data were given to it split (Hooks.Loaded): it cannot split them again", ErrConfig)
		}
		o := cfg.dataOptions()
		// What the aggregator kept aside, whether or not the party would
		// have: its call decided.
		o.HoldOut, o.Seed, o.HoldOutWithoutTestOnly = -1, h.Seed, false
		if h.Rows() {
			o.HoldOut = h.Share
		}
		d, err := dataset.LoadVertical(o, m)
		if err != nil {
			return party.Rows{}, err
		}
		if d.Features != data.Features || d.IDHash != data.IDHash || d.NTrain+d.NTest != data.NTrain+data.NTest {
			return party.Rows{}, fmt.Errorf("%w: the party's data changed on disk since it loaded them (%d rows of %d columns, now %d of %d)",
				ErrConfig, data.NTrain+data.NTest, data.Features, d.NTrain+d.NTest, d.Features)
		}
		train, test := d.PartTrain[m-1], d.PartTest[m-1]
		if f := cfg.hooks.PartyData[m]; f != nil {
			train, test = f(train, test)
		}
		*data = *d
		if h.Rows() && d.HeldOut == 0 {
			h = schemas.HoldOut{} // too few rows to keep one aside, as the aggregator's
		}
		cfg.split = &h
		return party.Rows{Train: train, Test: test, HeldOut: d.HeldOut, LR: cfg.Schedule(d.NTrain)}, nil
	}
}
