package party

import (
	"errors"
	"fmt"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
)

// The hold-out. The aggregator decides which training rows the run keeps
// aside (its length flags decide whether early stopping needs them) and
// says so in its call (schemas.Control.HoldOut). A party whose user gave
// no hold-out takes the aggregator's: it keeps the same rows aside
// (HoldOut.Resplit) before it answers the call, so that its hello counts
// the rows the aggregator's do. A party whose user chose one (--holdout)
// refuses a call that names another, in words naming both.

// ErrHoldOut reports a call whose hold-out the party does not take: it
// disagrees with the one its user gave, or the party cannot re-split its
// rows.
var ErrHoldOut = errors.New("the aggregator keeps other training rows aside")

// HoldOut is what a party's rows keep aside of its training rows and
// whether it may take another.
type HoldOut struct {
	schemas.HoldOut     // the share and seed its rows were split by (share 0: none)
	HeldOut         int // training rows kept aside
	// Given: the party's user chose the hold-out (--holdout): a call
	// naming another is refused (ErrHoldOut).
	Given bool
	// Flags names the options that fix the hold-out in the party's words
	// ("--holdout 0.1 --seed 1"; "" names HoldOut's).
	Flags string
	// Resplit gives the party's rows split by another hold-out: its
	// columns of the same rows, read as the aggregator's are (the same
	// scaling fitted on the rows trained on). nil: the party cannot, and
	// refuses a call naming another hold-out.
	Resplit func(h schemas.HoldOut) (Rows, error)
}

// Rows are a party's rows under a hold-out and what depends on their
// count.
type Rows struct {
	Train, Test *dataset.Matrix
	HeldOut     int          // training rows kept aside
	LR          zoo.Schedule // its step sizes (their decay scales with the rows)
}

// takeHoldOut makes the party's rows keep aside what the aggregator's call
// names (p.mu held), before it answers: nothing to do for a call of an
// earlier revision (nil: it says nothing; the aggregator checks the
// counts) or one naming the party's own hold-out.
func (p *Party) takeHoldOut(h *schemas.HoldOut) error {
	have := &p.cfg.HoldOut
	if h == nil || have.Same(h) {
		return nil
	}
	if err := h.Check(); err != nil {
		return err // Validate refused it already
	}
	mine := have.Flags
	if mine == "" {
		mine = have.HoldOut.String()
	}
	theirs := keptAside(h)
	if h.Rows() {
		theirs = fmt.Sprintf("%g of the training rows aside, chosen with seed %d", h.Share, h.Seed)
	}
	fix := fmt.Sprintf("give every process of the run the same --holdout and --seed, or drop them here: a party takes the aggregator's hold-out (%s)", h.String())
	switch {
	case have.Given:
		return fmt.Errorf("%w: the aggregator keeps %s; this party was given %s: %s", ErrHoldOut, theirs, mine, fix)
	case have.Resplit == nil:
		return fmt.Errorf("%w: the aggregator keeps %s; this party's rows (%s) cannot be split again: give it %s", ErrHoldOut, theirs, mine, h.String())
	}
	r, err := have.Resplit(*h)
	if err != nil {
		return fmt.Errorf("%w: keeping %s: %w", ErrHoldOut, theirs, err)
	}
	d := p.cfg.Model.InDim()
	if r.Train == nil || r.Train.NRows == 0 || r.Train.NCols != d || r.Test != nil && r.Test.NCols != d || r.LR.Eta0 <= 0 || r.LR.T0 < 0 {
		return fmt.Errorf("%w: the rows split by %s do not fit the party's model (%d columns)", ErrHoldOut, h.String(), d)
	}
	before := p.cfg.Train.NRows
	p.cfg.Train, p.cfg.Test, p.cfg.LR = r.Train, r.Test, r.LR
	have.HoldOut, have.HeldOut = *h, r.HeldOut
	if p.cfg.Params == nil {
		if f, ok := p.cfg.Model.(model.Fitter); ok {
			// Fitted on the rows it trains on, from the start New made:
			// as a party built on these rows would be.
			p.step.pcg.Seed(p.cfg.Seed, uint64(p.cfg.ID))
			p.cfg.Model.Init(p.w, p.step.rng)
			if err := f.Fit(p.w, p.cfg.Train, p.step.rng); err != nil {
				return fmt.Errorf("%w: party %d: %w", ErrModel, p.cfg.ID, err)
			}
		}
	}
	p.cfg.Log.Info().Int("party", p.cfg.ID).Int("rows", before).Int("held_out", r.HeldOut).Int("training", r.Train.NRows).
		Msgf("the aggregator keeps %s (%s): so does this party", theirs, h.String())
	return nil
}

// keptAside says which training rows h keeps aside.
func keptAside(h *schemas.HoldOut) string {
	if !h.Rows() {
		return "no training rows aside"
	}
	return "the training rows of " + h.String() + " aside"
}
