package broker

import (
	"strconv"
	"testing"
)

func TestSentRing(t *testing.T) {
	tests := []struct {
		size, kept int
		want       []uint64 // sequence numbers in the snapshot, oldest first
	}{
		{size: 4, kept: 0, want: nil},
		{size: 4, kept: 3, want: []uint64{1, 2, 3}},
		{size: 4, kept: 6, want: []uint64{3, 4, 5, 6}},
		{size: 0, kept: 5, want: nil},
	}
	for _, tc := range tests {
		r := SentRing{Size: tc.size}
		for i := 1; i <= tc.kept; i++ {
			r.Keep(uint64(i), "s."+strconv.Itoa(i), []byte(strconv.Itoa(i)), nil)
		}
		got := r.Snapshot(nil)
		if len(got) != len(tc.want) {
			t.Fatalf("size %d, %d kept: snapshot %v, want seqs %v", tc.size, tc.kept, got, tc.want)
		}
		for i, s := range got {
			if s.Seq != tc.want[i] || string(s.Data) != strconv.Itoa(int(s.Seq)) || s.Subject != "s."+strconv.Itoa(int(s.Seq)) {
				t.Errorf("size %d, %d kept: snapshot[%d] = %+v, want seq %d", tc.size, tc.kept, i, s, tc.want[i])
			}
		}
		// The snapshot owns its data: keeping more does not change it.
		if len(got) > 0 {
			r.Keep(99, "x", []byte("overwritten"), nil)
			r.Keep(100, "x", []byte("overwritten"), nil)
			r.Keep(101, "x", []byte("overwritten"), nil)
			r.Keep(102, "x", []byte("overwritten"), nil)
			if string(got[0].Data) != strconv.Itoa(int(got[0].Seq)) {
				t.Errorf("snapshot shares the ring's buffers: %q", got[0].Data)
			}
		}
	}
}

func TestSentRingKeepDoesNotAllocate(t *testing.T) {
	r := SentRing{Size: 8}
	data := make([]byte, 100)
	r.Keep(1, "s", data, nil)
	n := testing.AllocsPerRun(100, func() { r.Keep(2, "s", data, nil) })
	if n != 0 {
		t.Errorf("Keep allocates %v times", n)
	}
}

// A signed message is kept with its header (signature and chain link):
// sent again without it, its receivers rejected it as unsigned (a
// resumed aggregator's controls after a full stream: "signature missing:
// every message on ctl must be signed").
func TestSentRingKeepsHeaders(t *testing.T) {
	r := SentRing{Size: 2}
	hdr := map[string]string{"Asy-Sig": "s1", "Asy-Prev": "p1"}
	r.Keep(1, "ctl", []byte("a"), hdr)
	hdr["Asy-Sig"] = "changed by the next message"
	r.Keep(2, "ctl", []byte("b"), nil)
	got := r.Snapshot(nil)
	if len(got) != 2 || got[0].Header["Asy-Sig"] != "s1" || got[0].Header["Asy-Prev"] != "p1" || got[1].Header != nil {
		t.Fatalf("kept %+v", got)
	}
	r.Keep(3, "ctl", []byte("c"), nil) // over message 1's slot
	if got := r.Snapshot(nil); got[1].Seq != 3 || got[1].Header != nil {
		t.Fatalf("a slot kept the header of the message it held before: %+v", got)
	}
}
