package experiment

import (
	"reflect"
	"testing"
)

// An interrupted fig4 keeps the sets whose rows are all there.
func TestFinishedSets(t *testing.T) {
	row := func(set string, q int, mode string) Fig4Row {
		return Fig4Row{Set: set, Q: q, Mode: mode}
	}
	full := []Fig4Row{row("a9a", 1, "async"), row("a9a", 2, "async"), row("a9a", 1, "sync"), row("a9a", 2, "sync")}
	cases := []struct {
		name  string
		rows  []Fig4Row
		names []string
		n     int
	}{
		{"none", nil, nil, 0},
		{"one finished set", full, []string{"a9a"}, 4},
		{"a finished set and a partial one", append(append([]Fig4Row{}, full...), row("w8a", 1, "async")), []string{"a9a"}, 4},
		{"only a partial set", full[:3], nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rows, names := finishedSets(tc.rows, 4)
			if len(rows) != tc.n || !reflect.DeepEqual(names, tc.names) {
				t.Fatalf("kept %d rows of %v, want %d of %v", len(rows), names, tc.n, tc.names)
			}
		})
	}
}

// The provenance of a merged Table 4 keeps the earlier commands that last
// measured a kept set.
func TestTable4Provenance(t *testing.T) {
	cmds := []string{"asyrevel experiment table4 --quick", "asyrevel experiment table4 --sets a9a,w8a --epochs 6"}
	for _, c := range []struct {
		kept []string
		want int
	}{{[]string{"mnist"}, 1}, {[]string{"a9a", "w8a"}, 1}, {[]string{"uci-credit-card"}, 0}} {
		got := Table4Provenance(cmds, c.kept)
		if len(got) != c.want || (c.want == 1 && got[0] != cmds[map[bool]int{true: 0, false: 1}[c.kept[0] == "mnist"]]) {
			t.Errorf("kept %v: %v", c.kept, got)
		}
	}
}
