package schemas

import (
	"errors"
	"testing"
)

// A hello carries the call it answers as an eleventh field, which a hello
// of ten fields (an earlier revision's, or an older decoder reading it)
// does without; a call is addressed to one party and carries a nonce.
func TestHelloCall(t *testing.T) {
	c := NewCodec()
	for _, call := range []string{"", CallAsked, "bm9uY2U"} {
		h := &Hello{Header: Header{Version: Version, Party: 2, Seq: 3}, Model: "linear", InDim: 4, OutDim: 1, NTrain: 9, Call: call}
		b, err := c.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		if fields := int(b[0] & 0x0f); b[0]&0xf0 != 0x90 || fields != fieldsHello+min(len(call), 1) {
			t.Errorf("call %q: an array of %d fields", call, fields)
		}
		var got Hello
		if err := c.Unmarshal(b, &got); err != nil || got != *h {
			t.Errorf("call %q: %+v %v", call, got, err)
		}
	}
	lim := Limits{}
	for _, tc := range []struct {
		ctl Control
		ok  bool
	}{
		{Control{Header: Header{Version: Version, Party: 3, Seq: 1}, Op: CtlCall, Round: 5, Reason: "bm9uY2U"}, true},
		{Control{Header: Header{Version: Version, Party: 0, Seq: 1}, Op: CtlCall, Round: 5, Reason: "bm9uY2U"}, false},
		{Control{Header: Header{Version: Version, Party: 3, Seq: 1}, Op: CtlCall, Round: 5}, false},
	} {
		if err := tc.ctl.Validate(lim); (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrRange) {
			t.Errorf("%+v: %v", tc.ctl, err)
		}
	}
}
