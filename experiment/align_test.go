package experiment

import (
	"reflect"
	"testing"
)

func TestParseAlignCases(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []AlignCase
		err  bool
	}{
		{"2:10000:0.5", []AlignCase{{Orgs: 2, IDs: 10000, Overlap: 0.5}}, false},
		{" 2:10:0.5, 8:100:1 ,", []AlignCase{{Orgs: 2, IDs: 10, Overlap: 0.5}, {Orgs: 8, IDs: 100, Overlap: 1}}, false},
		{"1:10:0.5", nil, true}, // one organisation aligns with nobody
		{"2:0:0.5", nil, true},  // no ids
		{"2:10:1.5", nil, true}, // overlap above 1
		{"2:10", nil, true},     // a field missing
		{"2:x:0.5", nil, true},  // not a number
		{"2:10:NaN", nil, true}, // not a share
	} {
		got, err := ParseAlignCases(tc.in)
		if (err != nil) != tc.err || !tc.err && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: %v, %v", tc.in, got, err)
		}
	}
}
