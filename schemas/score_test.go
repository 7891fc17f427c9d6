package schemas

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzScoreRequest: a decoded request either is refused with ErrScore or
// holds at most MaxScoreIDs ids and encodes back to the same bytes (one
// encoding per request), and ScoreSeq reads its number.
func FuzzScoreRequest(f *testing.F) {
	f.Add(AppendScoreRequest(nil, 1, []string{"a", "b"}))
	f.Add(AppendScoreRequest(nil, 1<<40, nil))
	f.Add(bytes.Repeat([]byte{0x91}, 10))
	f.Add([]byte{0x93, 0x02, 0x01, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := unmarshalScoreRequest(data)
		if err != nil {
			if !errors.Is(err, ErrScore) {
				t.Fatalf("error of no sentinel: %v", err)
			}
			return
		}
		if len(r.IDs) > MaxScoreIDs {
			t.Fatalf("accepted %d ids", len(r.IDs))
		}
		if ScoreSeq(data) != r.Seq {
			t.Fatalf("ScoreSeq %d, decoded %d", ScoreSeq(data), r.Seq)
		}
		if r.V == ScoreVersion && !bytes.Equal(AppendScoreRequest(nil, r.Seq, r.IDs), data) && canonical(data) {
			t.Fatalf("re-encoded differently")
		}
		if err := r.Check(); err == nil && (r.Seq == 0 || r.V != ScoreVersion) {
			t.Fatalf("Check passed request %d of version %d", r.Seq, r.V)
		}
	})
}

// canonical reports whether data uses msgpack's shortest forms (what
// AppendScoreRequest writes); other encodings decode to the same request.
func canonical(data []byte) bool {
	r, err := unmarshalScoreRequest(data)
	return err == nil && len(AppendScoreRequest(nil, r.Seq, r.IDs)) == len(data)
}

// FuzzScoreAnswer: a decoded answer is refused with ErrScore or encodes
// back to an answer that decodes to the same values.
func FuzzScoreAnswer(f *testing.F) {
	f.Add(AppendScoreAnswer(nil, &ScoreAnswer{V: ScoreVersion, Seq: 3, Party: 2, Req: 9, K: 1, C: make([]byte, 16), Unknown: []string{"x"}, Err: "e"}))
	f.Add([]byte{0x99})
	f.Fuzz(func(t *testing.T, data []byte) {
		var a ScoreAnswer
		if err := DecodeScoreAnswer(data, &a); err != nil {
			if !errors.Is(err, ErrScore) {
				t.Fatalf("error of no sentinel: %v", err)
			}
			return
		}
		if a.Party < 0 || a.K < 0 || len(a.Unknown) > MaxScoreIDs || len(a.Refused) > MaxScoreIDs {
			t.Fatalf("accepted %+v", a)
		}
		var b ScoreAnswer
		if err := DecodeScoreAnswer(AppendScoreAnswer(nil, &a), &b); err != nil || b.Seq != a.Seq || b.Req != a.Req || !bytes.Equal(b.C, a.C) ||
			len(b.Unknown) != len(a.Unknown) || len(b.Refused) != len(a.Refused) || b.Err != a.Err {
			t.Fatalf("round trip: %v %+v %+v", err, a, b)
		}
		if ScoreSeq(data) != a.Seq {
			t.Fatalf("ScoreSeq %d, decoded %d", ScoreSeq(data), a.Seq)
		}
	})
}

// unmarshalScoreRequest decodes a request (copying its ids).
func unmarshalScoreRequest(data []byte) (*ScoreRequest, error) {
	v, seq, raw, err := DecodeScoreRequest(data, nil)
	if err != nil {
		return nil, err
	}
	r := &ScoreRequest{V: v, Seq: seq, IDs: make([]string, len(raw))}
	for i, id := range raw {
		r.IDs[i] = string(id)
	}
	return r, nil
}
