package trust

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"
)

// The chain's framing, computed by hand from its documentation.
func TestChainFraming(t *testing.T) {
	run, subject := "r1", "asyrevel.r1.out.3"
	g := []byte{0x00}
	g = append(g, "asyrevel/chain/v1"...)
	g = append(g, 0, byte(len(run)))
	g = append(g, run...)
	g = append(g, 0, byte(len(subject)))
	g = append(g, subject...)
	want0 := sha256.Sum256(g)
	if got := GenesisHead(run, subject); got != Hash(want0) {
		t.Fatalf("genesis %x, want %x", got, want0)
	}
	c := NewChain(run, subject)
	prev := want0
	for seq := uint64(1); seq <= 3; seq++ {
		pl := payload(seq, int(seq)*50)
		in := []byte{0x01}
		in = append(in, prev[:]...)
		in = binary.BigEndian.AppendUint64(in, seq)
		in = append(in, pl...)
		want := sha256.Sum256(in)
		s, h := c.Append(pl)
		if s != seq || h != Hash(want) || NextHead(Hash(prev), seq, pl) != Hash(want) {
			t.Fatalf("seq %d: head %x, want %x", s, h, want)
		}
		prev = want
	}
	if GenesisHead(run, "asyrevel.r1.out.4") == GenesisHead(run, subject) || GenesisHead("r2", subject) == GenesisHead(run, subject) {
		t.Fatal("genesis heads of different subjects or runs collide")
	}
}

func TestChainAppendDoesNotAllocate(t *testing.T) {
	c := NewChain("r", "asyrevel.r.out.1")
	pl := payload(1, 2300)
	c.Append(pl)
	if n := testing.AllocsPerRun(100, func() { c.Append(pl) }); n != 0 {
		t.Fatalf("%v allocations per append", n)
	}
}

func TestParseHash(t *testing.T) {
	h := GenesisHead("r", "s")
	got, err := ParseHash(h.String())
	if err != nil || got != h {
		t.Fatalf("round trip: %v %v", got, err)
	}
	var u Hash
	if err := u.UnmarshalText([]byte(h.String())); err != nil || u != h {
		t.Fatalf("UnmarshalText: %v", err)
	}
	s := h.String()
	for _, bad := range []string{"", s[:42], s + "A", s[:42] + "=", s[:20] + "\n" + s[21:], s[:20] + "+" + s[21:],
		s[:42] + "B", // non-zero trailing bits: a second text for the same bytes
	} {
		if _, err := ParseHash(bad); err == nil {
			t.Errorf("ParseHash(%q) accepted", bad)
		}
	}
	if len(s) != 43 {
		t.Fatalf("%q: %d characters, want 43", s, len(s))
	}
}
