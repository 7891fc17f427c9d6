package run

import (
	"github.com/asyrevel/asyrevel/observe"
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/schemas"
)

// job is a run in progress (Train, Aggregate, Participate): the Config the
// caller gave, the Hooks it plugged in, and the working state the run sets
// up on its way, which is neither a setting nor a hook.
type job struct {
	Config
	hooks Hooks          // Hooks.Log is where the run logs
	trust *runTrust      // keys, roster and receipts (trust.go)
	early *earlyStop     // the early stopping of the run's aggregator (stop.go)
	stuck *stuckWatch    // the stop of a run that does not learn (stuck.go)
	heal  *healState     // set when the participant resumes by itself after a lost broker connection (heal.go)
	watch *observe.Watch // the process's metrics and board (watch.go); nil without
	// resplit, in a party's process, splits its rows by the hold-out of
	// the aggregator's call (holdout.go); nil elsewhere.
	resplit func(m int, h schemas.HoldOut) (party.Rows, error)
	// split, once resplit has split the party's data by the aggregator's
	// hold-out, is that hold-out (nil: the data are split as Config says).
	split *schemas.HoldOut
}

// prepare is Config.Prepare for the run: a run given its data
// (Hooks.Loaded) does not read a split folder's party count.
func (j *job) prepare() error {
	if err := j.derive(j.hooks.Loaded != nil); err != nil {
		return err
	}
	return j.Validate()
}
