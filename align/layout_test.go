package align

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
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

// TestLayoutReachesParties: every party learns the whole layout (every
// party's width, the classes of the intersection's labels), the hub's.
func TestLayoutReachesParties(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	sets := randomSets(r, 3, shortIDs(500))
	labels := make([]float64, len(sets[0]))
	for i := range labels {
		labels[i] = float64(i % 3)
	}
	res, errs := runAll(t, "lay", memBuses(3), sets, func(c *Config) {
		if c.ID == 0 {
			c.Labels = labels
		}
	})
	for m, err := range errs {
		if err != nil {
			t.Fatalf("org %d: %v", m, err)
		}
	}
	checkAligned(t, sets, res)
	for m, r := range res {
		if !slices.Equal(r.Widths, []int{1, 2}) || r.Classes != countClasses(labels, res[0].Rows) || r.Classes != 3 {
			t.Errorf("org %d: widths %v, classes %d", m, r.Widths, r.Classes)
		}
	}
}

// rogueHub sends crafted, correctly signed messages on the hub's subject
// to party 1.
func rogueHub(t *testing.T, bus broker.Bus, r *trust.Roster, key *trust.Key, msgs []schemas.AlignMsg) {
	t.Helper()
	out, err := trust.NewOutbox(r, key, trust.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := out.Publisher(schemas.AlignHubSubject(r.Run, 1))
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range msgs {
		msg.Header = schemas.Header{Version: schemas.Version, Party: 1, Seq: pub.Next()}
		data, err := schemas.MarshalAlign(nil, &msg)
		if err != nil {
			t.Fatal(err)
		}
		st := pub.Append(data, true)
		hdr := map[string]string{trust.SigHeader: st.SigHeader(), trust.PrevHeader: string(st.AppendPrevHeader(nil))}
		if err := bus.Publish(context.Background(), &broker.Message{Subject: pub.Subject(), Header: hdr, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPartyRefusesBadLayout: a hub whose layout contradicts its result,
// or comes out of turn, is named; the party does not write a folder from
// it.
func TestPartyRefusesBadLayout(t *testing.T) {
	spec := Spec(1, Normalization{})
	good := make([]byte, ElementSize)
	if err := newSecret().hashMask(good, []string{"x"}, []byte("t")); err != nil {
		t.Fatal(err)
	}
	size := schemas.AlignMsg{Phase: schemas.AlignSize, Total: 1, Spec: spec}
	set := schemas.AlignMsg{Phase: schemas.AlignSet, Total: 1, Spec: spec, Data: good}
	layout := func(v ...uint32) schemas.AlignMsg {
		var b []byte
		for _, x := range v {
			b = u32(b, x)
		}
		return schemas.AlignMsg{Phase: schemas.AlignLayout, Total: uint64(len(v)), Features: 2, Parties: 1, Data: b}
	}
	result := schemas.AlignMsg{Phase: schemas.AlignResult, Total: 1, Width: 0, Features: 2, Parties: 1, Data: u32(nil, 0)}
	cases := []struct {
		name string
		msgs []schemas.AlignMsg
		want string
	}{
		{"widths against the result", []schemas.AlignMsg{size, set, layout(2, 5), result}, "the hub's layout [5] (5 columns; party-1's from 0) differs from its result (2 columns; party-1's 2 from 0)"},
		{"too many items", []schemas.AlignMsg{size, set, layout(2, 2, 2), result}, "aggregator's layout has 3 items, want 2"},
		{"no column", []schemas.AlignMsg{size, set, layout(2, 0), result}, "gives party-1 no column"},
		{"result before the layout", []schemas.AlignMsg{size, set, result}, "before its whole set and the layout"},
		{"layout before the set", []schemas.AlignMsg{size, layout(2, 2), set}, "the layout out of turn"},
		{"set before its size", []schemas.AlignMsg{set}, "the hub sent its set before stating its size"},
		{"more than stated", []schemas.AlignMsg{size, {Phase: schemas.AlignSet, Total: 2, Spec: spec, Data: good}}, "aggregator's set has 2 items, want 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			roster, keys, err := trust.GenerateRun("lay", 1)
			if err != nil {
				t.Fatal(err)
			}
			buses := memBuses(2)
			rogueHub(t, buses[0], roster, keys[0], c.msgs)
			// Every case ends on the hub's messages, which are there:
			// the silence timeout and the context bound a hang only (a
			// 2 s timeout could fire first on a busy host).
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			_, err = Run(ctx, Config{Run: "lay", ID: 1, Parties: 1, Bus: buses[1], Roster: roster, Key: keys[1], Spec: spec, Width: 2, Timeout: time.Minute},
				[]string{"x"})
			if !errors.Is(err, ErrPeer) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want ErrPeer with %q", err, c.want)
			}
		})
	}
}

// TestOwnFolders: the organisations' folders of one alignment load as
// their roles' data, agree by their records, and a tampered, reordered or
// foreign folder is refused with a reason.
func TestOwnFolders(t *testing.T) {
	dir := t.TempDir()
	files := []string{
		"id,y\na,1\nb,0\nc,1\nd,0\ne,1\n",
		"id,u,v\ne,1,2\nd,3,4\nc,5,6\nb,7,8\nz,9,9\n",
		"id,w\nb,1\nc,2\nd,3\ne,4\ny,5\n",
	}
	tables := make([]*Table, 3)
	sets := make([][]string, 3)
	for m, text := range files {
		opts := ReadOptions{Key: []string{"id"}}
		if m == 0 {
			opts.Label = "y"
		}
		var err error
		if tables[m], err = ReadCSV(writeFile(t, "f.csv", text), opts); err != nil {
			t.Fatal(err)
		}
		sets[m] = tables[m].Keys
	}
	res, errs := runAll(t, "own", memBuses(3), sets, func(c *Config) {
		c.Width = tables[c.ID].X.NCols
		if c.ID == 0 {
			c.Width, c.Labels = 0, tables[0].Labels
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	spec := Spec(1, Normalization{})
	checks := make([]*FolderCheck, 3)
	dirs := make([]string, 3)
	for m := range tables {
		dirs[m] = filepath.Join(dir, orgName(m))
		man, rec, err := WriteOwnFolder(dirs[m], "own", spec, m, tables[m], res[m])
		if err != nil {
			t.Fatal(err)
		}
		if man.Q != 2 || man.Features != 3 || man.Classes != 2 || !slices.Equal(man.Blocks, []dataset.Block{{Lo: 0, Hi: 2}, {Lo: 2, Hi: 3}}) || rec.Samples != 4 {
			t.Fatalf("%s: manifest %+v, record %+v", orgName(m), man, rec)
		}
		if !IsOwnFolder(dirs[m]) {
			t.Fatalf("%s's folder is not taken for one organisation's", orgName(m))
		}
		if checks[m], err = CheckFolder(dirs[m]); err != nil {
			t.Fatal(err)
		}
	}
	if err := CheckFolders(checks); err != nil {
		t.Fatal(err)
	}
	// Party 2 keeps its file but swaps two rows (and rewrites its
	// manifest and record to match): it checks alone, but its digest
	// differs from the others'.
	p, err := dataset.LoadPartyFile(filepath.Join(dirs[2], "party-2.train.gz"))
	if err != nil {
		t.Fatal(err)
	}
	swapped := &Result{Rows: slices.Clone(res[2].Rows), Lo: res[2].Lo, Features: 3, Parties: 2, Widths: res[2].Widths, Classes: 2}
	swapped.Rows[0], swapped.Rows[1] = swapped.Rows[1], swapped.Rows[0]
	other := filepath.Join(dir, "swapped")
	if _, _, err := WriteOwnFolder(other, "own", spec, 2, tables[2], swapped); err != nil {
		t.Fatal(err)
	}
	c2, err := CheckFolder(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckFolders([]*FolderCheck{checks[0], checks[1], c2}); err == nil || !strings.Contains(err.Error(), "not in one order") {
		t.Fatalf("a reordered folder: %v", err)
	}
	if err := CheckFolders([]*FolderCheck{checks[0], checks[2], c2}); err == nil || !strings.Contains(err.Error(), "are both party-2's") {
		t.Fatalf("the same organisation twice: %v", err)
	}
	// A file changed after it was written: the manifest's checksum.
	if err := os.WriteFile(filepath.Join(other, "party-2.train.gz"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckFolder(other); !errors.Is(err, dataset.ErrChecksum) {
		t.Fatalf("a changed file: %v", err)
	}
	// A record whose digest is not the file's ids'.
	rec, _ := ReadRecords(filepath.Join(dirs[1], RecordFile))
	rev := slices.Clone(p.IDs)
	slices.Reverse(rev)
	rec[0].OrderSHA256 = OrderDigest(rev)
	if err := writeRecords(filepath.Join(dirs[1], RecordFile), rec); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckFolder(dirs[1]); err == nil || !strings.Contains(err.Error(), "its record says") {
		t.Fatalf("a record of another order: %v", err)
	}
}

// writeRecords writes records as JSON (a list).
func writeRecords(path string, recs []Record) error {
	js, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("align: %w", err)
	}
	return nil
}
