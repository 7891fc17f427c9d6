package serve

import (
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
