package dataset

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestWriteSplitRoundTrip(t *testing.T) {
	tr, te, err := Synthetic(SyntheticConfig{Samples: 500, TestSamples: 100, Features: 11, Density: 0.4, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	const q = 3
	dir := filepath.Join(t.TempDir(), "split")
	man, err := WriteSplit(dir, q, tr, te, SplitSource{Train: "synthetic"})
	if err != nil {
		t.Fatal(err)
	}
	if man.Q != q || man.Features != 11 || len(man.Files) != 2*(q+1) || len(man.Sets) != 2 || man.Sets[1].Samples != 100 {
		t.Fatalf("manifest %+v", man)
	}
	if err := man.Verify(dir); err != nil {
		t.Fatal(err)
	}
	back, err := ReadManifest(dir)
	if err != nil || !slices.Equal(back.Blocks, man.Blocks) || len(back.Files) != len(man.Files) {
		t.Fatalf("ReadManifest: %+v, %v", back, err)
	}
	for _, c := range []struct {
		split string
		d     *Dataset
	}{{"train", tr}, {"test", te}} {
		labels, err := LoadLabels(filepath.Join(dir, LabelsFileName(c.split)))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(labels.Y, c.d.Y) || !slices.Equal(labels.LabelValues, c.d.LabelValues) || labels.Split != c.split || labels.IDs[0] != "1" {
			t.Errorf("%s labels differ", c.split)
		}
		parts, blocks, _ := VerticalSplit(c.d.X, q)
		var parties []*PartyData
		for m := range q {
			p, err := LoadPartyFile(filepath.Join(dir, PartyFileName(m+1, c.split)))
			if err != nil {
				t.Fatal(err)
			}
			if p.Block() != blocks[m] || p.Party != m+1 || p.Parties != q || p.Features != 11 {
				t.Errorf("party %d header %+v", m+1, p.PartyHeader)
			}
			if !slices.EqualFunc(dense(p.X), dense(parts[m]), slices.Equal) {
				t.Errorf("%s party %d: values differ", c.split, m+1)
			}
			if e, ok := man.File(c.split, m+1); !ok || e.NNZ != parts[m].NNZ() || e.Columns != blocks[m].Len() {
				t.Errorf("manifest entry %+v", e)
			}
			parties = append(parties, p)
		}
		if err := Align(labels, parties...); err != nil {
			t.Errorf("%s: %v", c.split, err)
		}
	}

	// Tampering is caught.
	p := filepath.Join(dir, PartyFileName(2, "test"))
	raw, _ := os.ReadFile(p)
	raw[len(raw)/2] ^= 1
	os.WriteFile(p, raw, 0o644)
	if err := man.Verify(dir); !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "party-2.test.gz") {
		t.Errorf("tampered: %v", err)
	}
	os.Remove(filepath.Join(dir, LabelsFileName("train")))
	if err := man.Verify(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	// Nothing temporary is left behind.
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".*")); len(tmp) > 0 {
		t.Errorf("left behind: %v", tmp)
	}
}

func TestWriteSplitCSVNames(t *testing.T) {
	d, err := ReadCSV(strings.NewReader("id,c,v,w,y\nu1,a,1,0,0\nu2,b,0,2,1\n"), CSVOptions{Categorical: []string{"c"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := WriteSplit(dir, 2, d, nil, SplitSource{}); err != nil {
		t.Fatal(err)
	}
	p, err := LoadPartyFile(filepath.Join(dir, PartyFileName(2, "train")))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Names, []string{"v", "w"}) || !slices.Equal(p.IDs, []string{"u1", "u2"}) {
		t.Errorf("names %v ids %v", p.Names, p.IDs)
	}
	if _, err := os.Stat(filepath.Join(dir, LabelsFileName("test"))); !os.IsNotExist(err) {
		t.Error("test files without a test set")
	}
}

func TestWriteSplitErrors(t *testing.T) {
	tr, te, _ := Synthetic(SyntheticConfig{Samples: 4, TestSamples: 2, Features: 3, Seed: 1})
	dir := t.TempDir()
	if _, err := WriteSplit(dir, 4, tr, nil, SplitSource{}); err == nil {
		t.Error("more parties than columns")
	}
	narrow, _, _ := Synthetic(SyntheticConfig{Samples: 2, Features: 2, Seed: 1})
	if _, err := WriteSplit(dir, 2, tr, narrow, SplitSource{}); !errors.Is(err, ErrMismatch) {
		t.Errorf("test of another width: %v", err)
	}
	for _, ids := range [][]string{{"a", "b c", "d", "e"}, {"a", "", "c", "d"}, {"a", "#b", "c", "d"}, {"a", "b", "a", "d"}} {
		bad := *tr
		bad.IDs = ids
		if _, err := WriteSplit(dir, 2, &bad, te, SplitSource{}); !errors.Is(err, ErrFormat) {
			t.Errorf("ids %q: %v", ids, err)
		}
	}
}

func TestAlign(t *testing.T) {
	labels := &Labels{LabelsHeader: LabelsHeader{Split: "train"}, IDs: []string{"a", "b", "c"}}
	party := func(m int, ids ...string) *PartyData {
		return &PartyData{PartyHeader: PartyHeader{Split: "train", Party: m, Parties: 2, Features: 4}, IDs: ids}
	}
	tests := []struct {
		name    string
		labels  *Labels
		parties []*PartyData
		msg     string
	}{
		{"aligned", labels, []*PartyData{party(1, "a", "b", "c"), party(2, "a", "b", "c")}, ""},
		{"party differs", labels, []*PartyData{party(1, "a", "b", "c"), party(2, "a", "x", "c")}, `sample 2 is "b" in the party 1 but "x" in the party 2`},
		{"labels differ", labels, []*PartyData{party(1, "a", "c", "b")}, `sample 2 is "b" in the labels but "c" in the party 1`},
		{"shorter", labels, []*PartyData{party(1, "a", "b")}, "the labels list 3 samples, the party 1 2"},
		{"other split", labels, []*PartyData{{PartyHeader: PartyHeader{Split: "test", Party: 1}}}, "test set"},
		{"same party twice", labels, []*PartyData{party(1, "a", "b", "c"), party(1, "a", "b", "c")}, "twice"},
		{"other partition", nil, []*PartyData{party(1, "a"), {PartyHeader: PartyHeader{Split: "train", Party: 2, Parties: 3, Features: 4}, IDs: []string{"a"}}}, "not from one split"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Align(tt.labels, tt.parties...)
			if tt.msg == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %v, want ErrMismatch with %q", err, tt.msg)
			}
		})
	}
}

func TestReadPartyFileErrors(t *testing.T) {
	const h = `#asyrevel-party {"version":1,"split":"train","party":1,"parties":2,"lo":0,"hi":2,"features":4,"samples":2}` + "\n"
	tests := []struct {
		name, text, msg string
	}{
		{"empty", "", "empty"},
		{"no header", "a 1:1\n", "does not start"},
		{"bad json", "#asyrevel-party {\n", "header"},
		{"unknown field", `#asyrevel-party {"version":1,"x":1}` + "\n", "unknown field"},
		{"bad header", `#asyrevel-party {"version":1,"split":"train","party":3,"parties":2,"lo":0,"hi":2,"features":4,"samples":2}` + "\n", "inconsistent"},
		{"index out of block", h + "a 3:1\nb\n", "[1, 2]"},
		{"decreasing", h + "a 2:1 1:1\nb\n", "increasing"},
		{"bad value", h + "a 1:x\nb\n", "finite"},
		{"no id", h + " 1:1\nb\n", "id"},
		{"too few", h + "a 1:1\n", "truncated"},
		{"too many", h + "a\nb\nc\n", "more samples"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadPartyFile(strings.NewReader(tt.text))
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %v, want ErrFormat with %q", err, tt.msg)
			}
		})
	}
	p, err := ReadPartyFile(strings.NewReader(h + "a 1:0.5 2:0\r\nb\t2:-3\n"))
	if err != nil || p.X.NNZ() != 2 || !slices.Equal(p.IDs, []string{"a", "b"}) {
		t.Errorf("valid file: %v %v", p, err)
	}
}

func TestReadLabelsErrors(t *testing.T) {
	const h = `#asyrevel-labels {"version":1,"split":"test","samples":2,"label_values":[-1,1]}` + "\n"
	tests := []struct {
		name, text, msg string
	}{
		{"wrong kind", `#asyrevel-party {}` + "\n", "does not start"},
		{"no labels", `#asyrevel-labels {"version":1,"split":"test","samples":0,"label_values":[]}` + "\n", "inconsistent"},
		{"duplicate label", `#asyrevel-labels {"version":1,"split":"test","samples":0,"label_values":[1,1]}` + "\n", "twice"},
		{"unknown label", h + "a +1\nb 0\n", `label "0"`},
		{"two labels", h + "a +1 -1\nb 1\n", "one label"},
		{"no label", h + "a\nb 1\n", "one label"},
		{"too few", h + "a 1\n", "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadLabels(strings.NewReader(tt.text))
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %v, want ErrFormat with %q", err, tt.msg)
			}
		})
	}
	l, err := ReadLabels(strings.NewReader(h + "a +1\nb -1\n"))
	if err != nil || !slices.Equal(l.Y, []int32{1, 0}) || l.Classes != 2 {
		t.Errorf("valid file: %v %v", l, err)
	}
}

// FuzzReadPartyFile: any content gives a valid PartyData or ErrFormat.
func FuzzReadPartyFile(f *testing.F) {
	const h = `#asyrevel-party {"version":1,"split":"train","party":1,"parties":2,"lo":3,"hi":6,"features":9,"samples":2}` + "\n"
	f.Add([]byte(h + "a 1:0.5 3:2\nb\n"))
	f.Add([]byte(h + "a 4:1\n"))
	f.Add([]byte(`#asyrevel-party {"version":1,"samples":99999999999}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ReadPartyFile(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v is not ErrFormat", err)
			}
			return
		}
		if err := p.X.Check(); err != nil {
			t.Fatal(err)
		}
		if p.X.NRows != len(p.IDs) || p.X.NRows != p.Samples || p.X.NCols != p.Hi-p.Lo {
			t.Fatalf("shape %dx%d, %d ids, header %+v", p.X.NRows, p.X.NCols, len(p.IDs), p.PartyHeader)
		}
	})
}

// FuzzReadLabels: any content gives valid Labels or ErrFormat.
func FuzzReadLabels(f *testing.F) {
	const h = `#asyrevel-labels {"version":1,"split":"train","samples":2,"label_values":[0,1,2]}` + "\n"
	f.Add([]byte(h + "a 1\nb 2\n"))
	f.Add([]byte(h + "a 3\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := ReadLabels(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v is not ErrFormat", err)
			}
			return
		}
		if len(l.IDs) != len(l.Y) || len(l.Y) != l.Samples {
			t.Fatalf("%d ids, %d labels, header %d", len(l.IDs), len(l.Y), l.Samples)
		}
		for _, y := range l.Y {
			if y < 0 || int(y) >= l.Classes {
				t.Fatalf("class %d of %d", y, l.Classes)
			}
		}
	})
}
