package aggregator

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/asyrevel/asyrevel/schemas"
)

// A party joins in three messages, so that a hello left in the log by a
// process that has died since is not a join (nor its initial pass):
//
//  1. the party's first hello asks to be called (Hello.Call =
//     schemas.CallAsked);
//  2. the aggregator answers it with a call (CtlCall) addressed to that
//     hello, carrying a nonce drawn when the aggregator was made;
//  3. the party answers with a hello that carries the nonce, then sends
//     its initial pass. Only that hello admits the party.
//
// A dead process never answers a call made after it died, and a hello
// that answers another aggregator's call is stale. A hello of an earlier
// revision (Call "") knows no call: it is admitted as it is.

// errStaleJoin marks what a process that is not (or no longer) joining
// sent: a hello answering another aggregator's call, an initial pass of a
// party not admitted. It is skipped without counting as a rejection: an
// earlier attempt's messages are no attack.
var errStaleJoin = errors.New("from an earlier attempt to join")

// newCallNonce draws an aggregator's call nonce: 16 random bytes,
// base64url. It does not draw from the aggregator's seeded generator,
// which re-execution replays.
func newCallNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// call answers party m's hello seq with the aggregator's call (a.mu
// held).
func (a *Aggregator) call(m int, seq uint64) {
	a.join.called[m] = seq
	hold := a.cfg.HoldOut
	c := &schemas.Control{Header: schemas.Header{Version: schemas.Version, Party: uint16(m)}, Op: schemas.CtlCall,
		Round: uint32(seq), Reason: a.join.nonce, HoldOut: &hold}
	a.publish(schemas.Subject(a.cfg.Run, schemas.KindControl, 0), schemas.KindControl, c)
}

// answersCall decides what party m's hello h (valid, fitting the run, in
// sequence) does (a.mu held): admit is true for a hello that answers this
// aggregator's call, or of an earlier revision; a hello that asks to be
// called is called; one that answers another aggregator's call is
// errStaleJoin. A replayer takes the first call answered in the log as
// its own.
func (a *Aggregator) answersCall(m int, h *schemas.Hello) (admit bool, err error) {
	switch {
	case h.Call == "":
		a.cfg.Log.Info().Int("party", m).Msg("party runs an earlier revision that answers no call: admitted by its hello alone")
		return true, nil
	case h.Call == schemas.CallAsked:
		if a.phase == joining {
			a.call(m, h.Seq)
		}
		return false, nil
	case a.join.adoptCall && a.join.nonce == "":
		a.join.nonce = h.Call
	}
	if h.Call != a.join.nonce {
		a.cfg.Log.Info().Int("party", m).Uint64("hello", h.Seq).Msg("a hello answering another aggregator's call (an earlier attempt's): not a join")
		return false, errStaleJoin
	}
	return true, nil
}

// The hold-out on the call: the aggregator's data keep HoldOutRows of the
// training rows aside (Config.HoldOut), and a party in a process of its
// own learns which from the call (schemas.Control.HoldOut) and keeps the
// same rows aside before it answers. Its first hello may therefore count
// its rows under another hold-out (none, or its own --holdout): the rows
// it holds in all, training and test, must be the aggregator's, and the
// party, called, either takes the aggregator's hold-out or refuses it
// with words naming both. The hello that answers the call is held to the
// aggregator's counts.

// helloLimits are the limits party m's hello h must fit: the run's, but
// for a first hello (one that asks to be called) whose training and test
// rows add up to the aggregator's, whatever share of them it keeps aside.
func (a *Aggregator) helloLimits(m int, h *schemas.Hello) schemas.Limits {
	lim := a.limits(m)
	if h.Call == schemas.CallAsked && uint64(h.NTrain)+uint64(h.NTest) == uint64(a.n)+uint64(len(a.cfg.TestLabels)) {
		lim.NTrain, lim.NTest = 0, 0
	}
	return lim
}

// errHoldOutRevision marks the refusal of a party that answered a call
// with its rows not split as the aggregator's are (holdOutWords).
var errHoldOutRevision = errors.New("a party of an earlier revision does not take the hold-out from the aggregator's call")

// holdOutWords adds to err, the refusal of party m's hello h that answers
// a call (or knows none) with rows that add up to the aggregator's but are
// not split as its are, what each keeps aside and the fix: such a party is
// of an earlier revision, which does not read the call's hold-out (this
// revision's takes it, or refuses it with its own words).
func (a *Aggregator) holdOutWords(m int, h *schemas.Hello, err error) error {
	held := a.n + a.cfg.HoldOutRows - int(h.NTrain)
	if !errors.Is(err, schemas.ErrShape) || h.Call == schemas.CallAsked || held < 0 || held == a.cfg.HoldOutRows ||
		uint64(h.NTrain)+uint64(h.NTest) != uint64(a.n)+uint64(len(a.cfg.TestLabels)) {
		return err
	}
	fix := fmt.Sprintf("give party %d --holdout %g --seed %d", m, a.cfg.HoldOut.Share, a.cfg.HoldOut.Seed)
	if !a.cfg.HoldOut.Rows() {
		fix = fmt.Sprintf("give party %d no --holdout", m)
	}
	return fmt.Errorf("%w; the aggregator keeps %d of the training rows aside (%s), party %d keeps %d: %w: %s, or run the same asyrevel everywhere (a party of this revision takes it: then the two read different data sets)",
		err, a.cfg.HoldOutRows, a.cfg.HoldOut.String(), m, held, errHoldOutRevision, fix)
}
