package schemas

import "errors"

// Sentinel errors. Every rejection wraps exactly one of them, so a receiver
// can count rejections by reason (see Reason).
var (
	ErrDecode    = errors.New("schemas: undecodable message")
	ErrVersion   = errors.New("schemas: unsupported schema version")
	ErrSubject   = errors.New("schemas: bad subject")
	ErrParty     = errors.New("schemas: party id does not match subject")
	ErrShape     = errors.New("schemas: wrong dimensions")
	ErrNonFinite = errors.New("schemas: non-finite value")
	ErrRange     = errors.New("schemas: value out of range")
	ErrReplay    = errors.New("schemas: replayed or out-of-order sequence")
	ErrState     = errors.New("schemas: message not expected now")
)

// Reason is a short, stable label for the sentinel error err wraps, for
// counting rejections: "decode", "version", "subject", "party", "shape",
// "nonfinite", "range", "replay", "state" or "other".
func Reason(err error) string {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return "other"
}

var reasons = []struct {
	err  error
	name string
}{
	{ErrDecode, "decode"},
	{ErrVersion, "version"},
	{ErrSubject, "subject"},
	{ErrParty, "party"},
	{ErrShape, "shape"},
	{ErrNonFinite, "nonfinite"},
	{ErrRange, "range"},
	{ErrReplay, "replay"},
	{ErrState, "state"},
}
