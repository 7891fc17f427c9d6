package schemas

import (
	"bytes"
	"testing"
)

// fuzzDecoder checks, for arbitrary input, that decoding never panics, that
// whatever decodes and validates re-encodes to a message that decodes to
// the same bytes, and that validation never panics either.
func fuzzDecoder(f *testing.F, newMsg func() Message) {
	c := NewCodec()
	extra := []Message{
		&Reply{Header: Header{Version: Version, Party: 1, Seq: 9}, ReqSeq: 3, Delta: []float64{0.5}, Mean: true},
		&Control{Header: Header{Version: Version, Seq: 1}, Op: CtlStart, BatchSeed: 12345},
		&Control{Header: Header{Version: Version, Seq: 2}, Op: CtlEval, Round: 3, Splits: EvalTest, Keep: 2},
		&Control{Header: Header{Version: Version, Party: 2, Seq: 3}, Op: CtlCall, Round: 1, Reason: "bm9uY2U", HoldOut: &HoldOut{Share: 0.1, Seed: 1}},
	}
	for _, m := range append(sampleMessages(), extra...) {
		if m.Kind() == newMsg().Kind() {
			b, _ := c.Marshal(m)
			f.Add(append([]byte(nil), b...))
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0x90})
	f.Fuzz(func(t *testing.T, data []byte) {
		c := NewCodec()
		m := newMsg()
		if err := c.Unmarshal(data, m); err != nil {
			return
		}
		// Valid for the zeroth-order algorithms or for the first-order
		// baseline (TIG); validation must never panic for either.
		lim := Limits{Party: int(m.Head().Party), K: 1, NTrain: 1000, NTest: 1000}
		zo := m.Validate(lim)
		lim.FirstOrder = true
		if fo := m.Validate(lim); zo != nil && fo != nil {
			return
		} else if zo == nil && fo == nil && (m.Kind() == KindOutput || m.Kind() == KindReply) {
			t.Fatalf("%s valid both as a zeroth-order and a first-order message", m.Kind())
		}
		// A valid control carries a hold-out only on a call, and then a
		// share of the rows in [0, 1) that a party can apply.
		if ctl, ok := m.(*Control); ok && ctl.HoldOut != nil && (ctl.Op != CtlCall || !(ctl.HoldOut.Share >= 0 && ctl.HoldOut.Share < 1)) {
			t.Fatalf("valid control %s with hold-out %+v", ctl.Op, *ctl.HoldOut)
		}
		b1, err := c.Marshal(m)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		b1 = append([]byte(nil), b1...)
		m2 := newMsg()
		if err := c.Unmarshal(b1, m2); err != nil {
			t.Fatalf("decode of re-encoded message: %v", err)
		}
		b2, _ := c.Marshal(m2)
		if !bytes.Equal(b1, b2) {
			t.Fatalf("encoding not stable")
		}
	})
}

func FuzzHello(f *testing.F)       { fuzzDecoder(f, func() Message { return &Hello{} }) }
func FuzzPartyOutput(f *testing.F) { fuzzDecoder(f, func() Message { return &PartyOutput{} }) }
func FuzzReply(f *testing.F)       { fuzzDecoder(f, func() Message { return &Reply{} }) }
func FuzzEvalOutput(f *testing.F)  { fuzzDecoder(f, func() Message { return &EvalOutput{} }) }
func FuzzControl(f *testing.F)     { fuzzDecoder(f, func() Message { return &Control{} }) }

func FuzzParseSubject(f *testing.F) {
	f.Add("asyrevel.r1.out.3")
	f.Add("asyrevel.r1.ctl")
	f.Fuzz(func(t *testing.T, s string) {
		k, m, err := ParseSubject("r1", s)
		if err == nil && Subject("r1", k, m) != s {
			t.Fatalf("%q parsed to %v %d which prints as %q", s, k, m, Subject("r1", k, m))
		}
	})
}
