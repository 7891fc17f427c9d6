package serve

import (
	"bytes"
	"errors"
	"testing"

	"github.com/asyrevel/asyrevel/dataset"
)

// FuzzUnmarshal: a decoded model file either is refused with one of the
// package's errors or passes Check and encodes back to a file that decodes
// to the same parameters.
func FuzzUnmarshal(f *testing.F) {
	good := &File{Run: "r", Role: RoleParty, Party: 1, Parties: 2, Kind: KindLinear, In: 2, Out: 1, K: 1, Params: []float64{1, -2},
		Read: ReadSpec{Format: dataset.FormatLIBSVM, Features: 4}, Columns: &Columns{Lo: 0, Hi: 2}}
	b, err := good.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(Magic))
	f.Add(b[:len(b)/2])
	// The label-free profile's kinds: a codebook party and an embed head
	// (a hostile file must not make Check build a huge head).
	for _, g := range []*File{
		{Run: "r", Role: RoleParty, Party: 1, Parties: 2, Kind: KindCodebook, In: 2, Out: 1, K: 1, Codes: 2, Params: []float64{0, 1, 1, 0},
			Read: ReadSpec{Format: dataset.FormatLIBSVM, Features: 4}, Columns: &Columns{Lo: 0, Hi: 2}},
		{Run: "r", Role: RoleAggregator, Parties: 2, Kind: KindEmbed, In: 2, Out: 2, K: 1, Codes: 2, EmbedDim: 1, Params: make([]float64, 2*2*1+2*2+2),
			Read: ReadSpec{Format: dataset.FormatLIBSVM, Features: 4}, Labels: &LabelsSpec{Classes: 2, Values: []float64{0, 1}}},
	} {
		if err := g.Check(); err != nil {
			f.Fatal(err)
		}
		b, err := g.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Unmarshal(data)
		if err != nil {
			if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrSignature) {
				t.Fatalf("error of no sentinel: %v", err)
			}
			return
		}
		if err := m.Check(); err != nil {
			t.Fatalf("accepted a file that fails Check: %v", err)
		}
		again, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		m2, err := Unmarshal(again)
		if err != nil || len(m2.Params) != len(m.Params) {
			t.Fatalf("re-encoded file: %v", err)
		}
	})
}

// FuzzRequest: a decoded request either is refused with ErrMessage or
// holds at most MaxIDs ids and encodes back to the same bytes (one
// encoding per request), and SeqOf reads its number.
func FuzzRequest(f *testing.F) {
	f.Add(AppendRequest(nil, 1, []string{"a", "b"}))
	f.Add(AppendRequest(nil, 1<<40, nil))
	f.Add(bytes.Repeat([]byte{0x91}, 10))
	f.Add([]byte{0x93, 0x02, 0x01, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := UnmarshalRequest(data)
		if err != nil {
			if !errors.Is(err, ErrMessage) {
				t.Fatalf("error of no sentinel: %v", err)
			}
			return
		}
		if len(r.IDs) > MaxIDs {
			t.Fatalf("accepted %d ids", len(r.IDs))
		}
		if SeqOf(data) != r.Seq {
			t.Fatalf("SeqOf %d, decoded %d", SeqOf(data), r.Seq)
		}
		if r.V == WireVersion && !bytes.Equal(r.Marshal(), data) && canonical(data) {
			t.Fatalf("re-encoded differently")
		}
		if err := r.Check(); err == nil && (r.Seq == 0 || r.V != WireVersion) {
			t.Fatalf("Check passed request %d of version %d", r.Seq, r.V)
		}
	})
}

// canonical reports whether data uses msgpack's shortest forms (what
// AppendRequest writes); other encodings decode to the same request.
func canonical(data []byte) bool {
	r, err := UnmarshalRequest(data)
	return err == nil && len(r.Marshal()) == len(data)
}

// FuzzAnswer: a decoded answer is refused with ErrMessage or encodes
// back to an answer that decodes to the same values.
func FuzzAnswer(f *testing.F) {
	f.Add(AppendAnswer(nil, &Answer{V: WireVersion, Seq: 3, Party: 2, Req: 9, K: 1, C: make([]byte, 16), Unknown: []string{"x"}, Err: "e"}))
	f.Add([]byte{0x99})
	f.Fuzz(func(t *testing.T, data []byte) {
		var a Answer
		if err := DecodeAnswer(data, &a); err != nil {
			if !errors.Is(err, ErrMessage) {
				t.Fatalf("error of no sentinel: %v", err)
			}
			return
		}
		if a.Party < 0 || a.K < 0 || len(a.Unknown) > MaxIDs || len(a.Refused) > MaxIDs {
			t.Fatalf("accepted %+v", a)
		}
		var b Answer
		if err := DecodeAnswer(AppendAnswer(nil, &a), &b); err != nil || b.Seq != a.Seq || b.Req != a.Req || !bytes.Equal(b.C, a.C) ||
			len(b.Unknown) != len(a.Unknown) || len(b.Refused) != len(a.Refused) || b.Err != a.Err {
			t.Fatalf("round trip: %v %+v %+v", err, a, b)
		}
		if SeqOf(data) != a.Seq {
			t.Fatalf("SeqOf %d, decoded %d", SeqOf(data), a.Seq)
		}
	})
}
