package align

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

func TestNormalization(t *testing.T) {
	cases := []struct {
		n        Normalization
		in, want string
	}{
		{Normalization{}, "  Ab  C\td ", "ab c d"},
		{Normalization{KeepSpace: true}, " Ab ", " ab "},
		{Normalization{KeepCase: true}, " Ab ", "Ab"},
		{Normalization{StripZeros: true}, "007", "7"},
		{Normalization{StripZeros: true}, "000", "0"},
		{Normalization{StripZeros: true}, "007a", "007a"},
		{Normalization{}, "007", "007"},
		{Normalization{}, "ÉCOLE", "école"},
	}
	for _, c := range cases {
		if got := c.n.Cell(c.in); got != c.want {
			t.Errorf("%v.Cell(%q) = %q, want %q", c.n, c.in, got, c.want)
		}
	}
	if _, err := (Normalization{}).Key([]string{"a", " "}); err == nil {
		t.Error("an empty cell of a composite key is accepted")
	}
	k1, _ := Normalization{}.Key([]string{"a b", "c"})
	k2, _ := Normalization{}.Key([]string{"a", "b c"})
	if k1 == k2 {
		t.Error("composite keys that differ collide")
	}
	if Spec(1, Normalization{}) == Spec(1, Normalization{StripZeros: true}) {
		t.Error("the spec does not name the rules")
	}
}

func TestIDText(t *testing.T) {
	for in, want := range map[string]string{"abc": "abc", "a b": "a%20b", "a#%": "a%23%25", "a\x1fb": "a%1Fb"} {
		if got := IDText(in); got != want {
			t.Errorf("IDText(%q) = %q, want %q", in, got, want)
		}
	}
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadCSVErrors(t *testing.T) {
	cases := []struct {
		name, text string
		opts       ReadOptions
		err        error
		want       string
	}{
		{"empty", "", ReadOptions{Key: []string{"id"}}, ErrInput, "empty"},
		{"no rows", "id,x\n", ReadOptions{Key: []string{"id"}}, ErrInput, "no rows"},
		{"no key column", "cust,x\n1,2\n", ReadOptions{Key: []string{"id"}}, ErrInput, `key column "id" missing (the header has cust, x)`},
		{"no label column", "id,x\n1,2\n", ReadOptions{Key: []string{"id"}, Label: "y"}, ErrInput, `label column "y" missing`},
		{"duplicates", "id,x\nA,1\nb,2\na,3\n B ,4\nc,5\n", ReadOptions{Key: []string{"id"}}, ErrDuplicate, "2 rows repeat an earlier row's key (the first: line 4 repeats line 2)"},
		{"empty key", "id,x\nA,1\n,2\n", ReadOptions{Key: []string{"id"}}, ErrInput, "line 3: empty key"},
		{"not a number", "id,tier\nA,silver\n", ReadOptions{Key: []string{"id"}}, ErrInput,
			`column "tier": value "silver" is not a finite number: if the column is categorical, give --categorical tier (one-hot encoding); to leave it out, --drop tier; if the value means missing, give --na "silver"`},
		{"missing refused", "id,x,z\nA,1,2\nB,,3\n", ReadOptions{Key: []string{"id"}, Missing: dataset.MissingError}, ErrInput,
			`line 3, column 2 ("x"): an empty cell: say how to fill it: --missing zero (read as 0) or --missing drop (leave such rows out)`},
		{"missing label", "id,y,x\nA,,1\n", ReadOptions{Key: []string{"id"}, Label: "y"}, ErrInput, `line 2: the label (column "y") is missing`},
		{"drop the key", "id,x\nA,1\n", ReadOptions{Key: []string{"id"}, Drop: []string{"id"}}, ErrInput, `--drop "id": it is the key column`},
		{"all dropped", "id,x\nA,\n", ReadOptions{Key: []string{"id"}, Missing: dataset.MissingDrop}, ErrInput, "no rows left"},
		{"bad label", "id,y\nA,0.5\n", ReadOptions{Key: []string{"id"}, Label: "y"}, ErrInput, "not an integer class code"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadCSV(writeFile(t, "f.csv", c.text), c.opts)
			if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %v with %q", err, c.err, c.want)
			}
		})
	}
	tb, err := ReadCSV(writeFile(t, "f.csv", "id,x\nA,1\nb,2\na,3\n"), ReadOptions{Key: []string{"id"}, Dedupe: DedupeFirst})
	if err != nil || tb.Len() != 2 || tb.Dropped != 1 || tb.X.NNZ() != 2 || tb.X.Values[0] != 1 {
		t.Fatalf("dedupe first: %v, %+v", err, tb)
	}
}

// align reads a CSV file's cells as data split and train do: the missing
// policy, with a count of what it did, --drop and --categorical (one-hot,
// categories sorted as dataset sorts them); it keeps each row's key as
// written and its row in the file.
func TestReadCSVCells(t *testing.T) {
	text := "id,tier,x,note,y\n" +
		"CUST-1,silver,1,a,0\n" +
		"CUST-2,gold,,b,1\n" +
		"CUST-3,,2,c,1\n" +
		" CUST-4 ,silver,NA,d,0\n"
	path := writeFile(t, "f.csv", text)
	base := ReadOptions{Key: []string{"id"}, Label: "y", Drop: []string{"note"}, Categorical: []string{"tier"}}
	for _, c := range []struct {
		policy  dataset.MissingPolicy
		rows    int
		written []string
		source  []int32
		count   string
	}{
		{dataset.MissingZero, 4, []string{"CUST-1", "CUST-2", "CUST-3", "CUST-4"}, []int32{0, 1, 2, 3}, "3 missing values in 3 rows, read as 0"},
		{dataset.MissingDrop, 1, []string{"CUST-1"}, []int32{0}, "3 missing values in 3 rows, those 3 rows left out (--missing drop)"},
	} {
		opts := base
		opts.Missing = c.policy
		tb, err := ReadCSV(path, opts)
		if err != nil {
			t.Fatalf("%v: %v", c.policy, err)
		}
		if tb.Len() != c.rows || !slices.Equal(tb.Written, c.written) || !slices.Equal(tb.Source, c.source) {
			t.Errorf("%v: %d rows, written %q, source %v", c.policy, tb.Len(), tb.Written, tb.Source)
		}
		if got := tb.Missing.String(); !strings.HasPrefix(got, c.count) {
			t.Errorf("%v: missing %q, want %q", c.policy, got, c.count)
		}
		if want := []string{"tier=gold", "tier=silver", "x"}; !slices.Equal(tb.Names, want) {
			t.Errorf("%v: names %q, want %q", c.policy, tb.Names, want)
		}
	}
	tb, err := ReadCSV(path, ReadOptions{Key: []string{"id"}, Label: "y", Drop: []string{"note"}, Categorical: []string{"tier"}})
	if err != nil {
		t.Fatal(err)
	}
	// Row 0: silver (feature 1), x = 1 (feature 2); row 1: gold (0);
	// row 2: no tier, x = 2; row 3: silver.
	want := [][]float32{{0, 1, 1}, {1, 0, 0}, {0, 0, 2}, {0, 1, 0}}
	for i, w := range want {
		got := make([]float32, 3)
		idx, val := tb.X.Row(i)
		for k, j := range idx {
			got[j] = val[k]
		}
		if !slices.Equal(got, w) {
			t.Errorf("row %d: %v, want %v", i, got, w)
		}
	}
	// New rows read with the training set's encoding: a category it does
	// not know is no category, the columns follow the encoding's names.
	enc := dataset.EncodingFromNames(tb.Names, []string{"tier"})
	nb, err := ReadCSV(writeFile(t, "n.csv", "x,id,tier,extra\n5,n1,bronze,9\n6,n2,gold,9\n"), ReadOptions{Key: []string{"id"}, Encoding: enc})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(nb.Names, tb.Names) || nb.X.NCols != 3 || !slices.Equal(nb.X.Values, []float32{5, 1, 6}) || !slices.Equal(nb.X.Indices, []int32{2, 0, 2}) {
		t.Errorf("new rows: names %q, %+v", nb.Names, nb.X)
	}
}

// rogue sends crafted, correctly signed messages on party m's alignment
// subject: the hub must name it and stop, not hang.
func rogue(t *testing.T, bus broker.Bus, r *trust.Roster, key *trust.Key, m int, msgs []schemas.AlignMsg, raw [][]byte) {
	t.Helper()
	out, err := trust.NewOutbox(r, key, trust.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := out.Publisher(schemas.AlignSubject(r.Run, m))
	if err != nil {
		t.Fatal(err)
	}
	send := func(data []byte) {
		st := pub.Append(data, true)
		hdr := map[string]string{trust.SigHeader: st.SigHeader(), trust.PrevHeader: string(st.AppendPrevHeader(nil))}
		if err := bus.Publish(context.Background(), &broker.Message{Subject: pub.Subject(), Header: hdr, Data: data}); err != nil {
			t.Error(err)
		}
	}
	for _, msg := range msgs {
		msg.Header = schemas.Header{Version: schemas.Version, Party: uint16(m), Seq: pub.Next()}
		data, err := schemas.MarshalAlign(nil, &msg)
		if err != nil {
			t.Fatal(err)
		}
		send(data)
	}
	for _, data := range raw {
		send(data)
	}
}

func TestHubRefusesBadPeer(t *testing.T) {
	spec := Spec(1, Normalization{})
	good := make([]byte, ElementSize)
	{
		k := newSecret()
		if err := k.hashMask(good, []string{"x"}, []byte("t")); err != nil {
			t.Fatal(err)
		}
	}
	bad := make([]byte, ElementSize)
	for i := range bad {
		bad[i] = 0xff
	}
	short := schemas.AlignMsg{Phase: schemas.AlignSet, Total: 1, Spec: spec, Data: good}
	short.Header = schemas.Header{Version: schemas.Version, Party: 1, Seq: 2} // after the size
	wrongLen, _ := schemas.MarshalAlign(nil, &short)
	// 33 bytes of data: not a whole number of elements.
	wrongLen = append(wrongLen[:len(wrongLen)-ElementSize-2], 0xc4, 33)
	wrongLen = append(wrongLen, append(good, 0)...)
	size := func(n uint64) schemas.AlignMsg {
		return schemas.AlignMsg{Phase: schemas.AlignSize, Total: n, Spec: spec, Width: 1}
	}
	cases := []struct {
		name string
		msgs []schemas.AlignMsg
		raw  [][]byte
		err  error
		want string
	}{
		{"non-group element", []schemas.AlignMsg{size(2), {Phase: schemas.AlignSet, Total: 2, Spec: spec, Data: append(append([]byte{}, good...), bad...)}},
			nil, ErrPeer, "party-1's set: align: not a group element: item 1"},
		{"identity", []schemas.AlignMsg{size(1), {Phase: schemas.AlignSet, Total: 1, Spec: spec, Data: make([]byte, ElementSize)}},
			nil, ErrPeer, "identity"},
		{"wrong length", []schemas.AlignMsg{size(1)}, [][]byte{wrongLen}, ErrPeer, "party-1 sent a malformed message"},
		{"echo of the wrong length", []schemas.AlignMsg{size(1), {Phase: schemas.AlignSet, Total: 1, Spec: spec, Data: good},
			{Phase: schemas.AlignEcho, Total: 2, Data: make([]byte, 2*schemas.AlignEchoSize)}}, nil, ErrPeer, "party-1's echo has 2 items, want 3"},
		{"chunk out of order", []schemas.AlignMsg{size(3), {Phase: schemas.AlignSet, Total: 3, Offset: 1, Spec: spec, Data: good}},
			nil, ErrPeer, "starts at item 1"},
		{"left mid-protocol", []schemas.AlignMsg{size(2), {Phase: schemas.AlignSet, Total: 2, Spec: spec, Data: good}},
			nil, ErrTimeout, "party-1 sent nothing for 1s while aggregator waited for its set (1 of 2 items)"},
		{"silent before its size", nil, nil, ErrTimeout, "party-1 sent nothing for 1s while aggregator waited for its set's size"},
		{"set before its size", []schemas.AlignMsg{{Phase: schemas.AlignSet, Total: 1, Spec: spec, Data: good}},
			nil, ErrPeer, "party-1 sent its set before stating its size"},
		{"set larger than stated", []schemas.AlignMsg{size(1), {Phase: schemas.AlignSet, Total: 2, Spec: spec, Data: good}},
			nil, ErrPeer, "party-1's set has 2 items, want 1"},
		{"size twice", []schemas.AlignMsg{size(1), size(1)}, nil, ErrPeer, "party-1 stated its set's size twice"},
		{"over the bound", []schemas.AlignMsg{size(13)}, nil, ErrOversize, "party-1 states a set of 13 keys, more than 4 times the hub's 3 (at most 12)"},
		{"aborts", []schemas.AlignMsg{{Phase: schemas.AlignAbort, Reason: "disk full"}}, nil, ErrAborted, "party-1: disk full"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			roster, keys, err := trust.GenerateRun("bad", 1)
			if err != nil {
				t.Fatal(err)
			}
			buses := memBuses(2)
			rogue(t, buses[1], roster, keys[1], 1, c.msgs, c.raw)
			// The silence timeout is 1 s where the case wants it to
			// fire, a minute (a bound on a hang) where the rogue's
			// messages must be read first: on a busy host the hub could
			// take more than 1 s to get to them. The context bounds a
			// hang; an error by it is not the one wanted.
			timeout := time.Minute
			if c.err == ErrTimeout {
				timeout = time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			_, err = Run(ctx, Config{Run: "bad", ID: 0, Parties: 1, Bus: buses[0], Roster: roster, Key: keys[0], Spec: spec, Timeout: timeout},
				[]string{"a", "b", "c"})
			if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %v with %q", err, c.err, c.want)
			}
		})
	}
}

// TestForgedMessageCounted: a message on a party's subject signed with
// another key is rejected and counted, not held against the party.
func TestForgedMessageCounted(t *testing.T) {
	roster, keys, err := trust.GenerateRun("forge", 1)
	if err != nil {
		t.Fatal(err)
	}
	buses := memBuses(3)
	spec := Spec(1, Normalization{})
	// The hub's key on party 1's subject: the verifier refuses it.
	out, _ := trust.NewOutbox(roster, keys[0], trust.Policy{})
	if _, err := out.Publisher(schemas.AlignSubject("forge", 1)); !errors.Is(err, trust.ErrNotOwner) {
		t.Fatalf("outbox: %v", err)
	}
	m := schemas.AlignMsg{Phase: schemas.AlignAbort, Reason: "forged"}
	m.Header = schemas.Header{Version: schemas.Version, Party: 1, Seq: 1}
	data, _ := schemas.MarshalAlign(nil, &m)
	sig := trust.SignHead(keys[0], trust.AggregatorID, "forge", schemas.AlignSubject("forge", 1), 1, trust.NextHead(trust.GenesisHead("forge", schemas.AlignSubject("forge", 1)), 1, data))
	if err := buses[2].Publish(context.Background(), &broker.Message{Subject: schemas.AlignSubject("forge", 1), Data: data,
		Header: map[string]string{trust.SigHeader: sig.Header()}}); err != nil {
		t.Fatal(err)
	}
	res, errs := runAll(t, "forge", buses[:2], [][]string{{"a", "b"}, {"b", "c"}}, func(c *Config) {
		c.Roster, c.Key = roster, keys[c.ID]
		c.Spec = spec
	})
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("errors %v, %v", errs[0], errs[1])
	}
	if res[0].Stats.Rejected != 1 || len(res[0].Rows) != 1 {
		t.Fatalf("rejected %d, rows %d", res[0].Stats.Rejected, len(res[0].Rows))
	}
}

// TestPartyNamesSilentHub: a hub that sends half its set and leaves makes
// the party fail within its timeout, naming the hub.
func TestPartyNamesSilentHub(t *testing.T) {
	roster, keys, err := trust.GenerateRun("gone", 1)
	if err != nil {
		t.Fatal(err)
	}
	buses := memBuses(2)
	spec := Spec(1, Normalization{})
	out, _ := trust.NewOutbox(roster, keys[0], trust.Policy{})
	pub, _ := out.Publisher(schemas.AlignHubSubject("gone", 1))
	good := make([]byte, ElementSize)
	_ = newSecret().hashMask(good, []string{"x"}, []byte("t"))
	for _, m := range []schemas.AlignMsg{{Phase: schemas.AlignSize, Total: 2, Spec: spec}, {Phase: schemas.AlignSet, Total: 2, Spec: spec, Data: good}} {
		m.Header = schemas.Header{Version: schemas.Version, Party: 1, Seq: pub.Next()}
		data, _ := schemas.MarshalAlign(nil, &m)
		st := pub.Append(data, true)
		if err := buses[0].Publish(context.Background(), &broker.Message{Subject: pub.Subject(), Data: data,
			Header: map[string]string{trust.SigHeader: st.SigHeader(), trust.PrevHeader: string(st.AppendPrevHeader(nil))}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = Run(ctx, Config{Run: "gone", ID: 1, Parties: 1, Bus: buses[1], Roster: roster, Key: keys[1], Spec: spec, Width: 1, Timeout: time.Second}, []string{"a"})
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "aggregator sent nothing for 1s while party-1 waited for the hub's set (1 of 2 items)") {
		t.Fatalf("got %v", err)
	}
}
