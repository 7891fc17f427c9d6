package replay

import "testing"

func TestAckMeta(t *testing.T) {
	cases := []struct {
		reply     string
		seq, pend uint64
		ts        int64
		ok        bool
	}{
		{"$JS.ACK.ASYREVEL_r.cons.1.42.7.1700000000123456789.5", 42, 5, 1700000000123456789, true},
		{"$JS.ACK.dom.ACCHASH.ASYREVEL_r.cons.1.42.7.1700000000123456789.0.rand", 42, 0, 1700000000123456789, true},
		{"$JS.ACK.dom.ACCHASH.ASYREVEL_r.cons.1.42.7.1700000000123456789.3", 42, 3, 1700000000123456789, true},
		{"$JS.ACK.a.b.c", 0, 0, 0, false},
		{"_INBOX.x.y", 0, 0, 0, false},
		{"$JS.ACK.s.c.1.x.7.8.5", 0, 0, 0, false},
		{"$JS.ACK.a.b.c.d.e.f.g.h.i.j.k.l.m", 0, 0, 0, false},
		{"$JS.ACK.s.c.1.42.7.99.5.", 0, 0, 0, false},
		{"", 0, 0, 0, false},
	}
	for _, c := range cases {
		seq, ts, pend, ok := ackMeta(c.reply)
		if ok != c.ok || seq != c.seq || ts != c.ts || pend != c.pend {
			t.Errorf("%q: got %d %d %d %v", c.reply, seq, ts, pend, ok)
		}
	}
}

func FuzzAckMeta(f *testing.F) {
	f.Add("$JS.ACK.ASYREVEL_r.cons.1.42.7.1700000000123456789.5")
	f.Fuzz(func(t *testing.T, s string) {
		seq, _, _, ok := ackMeta(s)
		if !ok && seq != 0 {
			t.Fatal("seq without ok")
		}
	})
}
