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

// FuzzRequest: a decoded request either fails Check with ErrMessage or
// holds 1..MaxIDs ids of 1..MaxIDLen bytes.
func FuzzRequest(f *testing.F) {
	b, _ := marshal(&Request{V: WireVersion, Req: 1, IDs: []string{"a", "b"}})
	f.Add(b)
	f.Add(bytes.Repeat([]byte{0x91}, 10))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Request
		if err := unmarshal(data, &r); err != nil {
			if !errors.Is(err, ErrMessage) {
				t.Fatalf("error of no sentinel: %v", err)
			}
			return
		}
		if err := r.Check(); err != nil {
			if !errors.Is(err, ErrMessage) {
				t.Fatalf("error of no sentinel: %v", err)
			}
			return
		}
		if len(r.IDs) == 0 || len(r.IDs) > MaxIDs || r.Req == 0 {
			t.Fatalf("accepted %d ids, req %d", len(r.IDs), r.Req)
		}
		for _, id := range r.IDs {
			if len(id) == 0 || len(id) > MaxIDLen {
				t.Fatalf("accepted an id of %d bytes", len(id))
			}
		}
	})
}
