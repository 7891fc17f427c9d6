package broker

import (
	"errors"
	"strings"
	"testing"
)

func TestSubjectMatch(t *testing.T) {
	cases := []struct {
		filter, subject string
		want            bool
	}{
		{"a", "a", true},
		{"a", "b", false},
		{"a.b", "a.b", true},
		{"a.b", "a", false},
		{"a", "a.b", false},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.*", "a", false},
		{"*", "a", true},
		{"*", "a.b", false},
		{"*.b", "a.b", true},
		{"*.b", "a.c", false},
		{"a.>", "a.b", true},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{">", "a", true},
		{">", "a.b.c", true},
		{"a.*.c", "a.b.c", true},
		{"a.*.c", "a.b.d", false},
		{"a.*.>", "a.b.c.d", true},
		{"a.*.>", "a.b", false},
		{"asyrevel.r.out.*", "asyrevel.r.out.3", true},
		{"asyrevel.r.out.*", "asyrevel.r.reply.3", false},
		{"asyrevel.r.out.1", "asyrevel.r.out.10", false},
		{"asyrevel.r.out.10", "asyrevel.r.out.1", false},
		{"a*", "a*", true}, // not a wildcard token: literal
		{"a*", "ab", false},
	}
	for _, c := range cases {
		if got := SubjectMatch(c.filter, c.subject); got != c.want {
			t.Errorf("SubjectMatch(%q, %q) = %v, want %v", c.filter, c.subject, got, c.want)
		}
	}
}

func TestFiltersOverlap(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"a.*", "a.b", true},
		{"a.*", "*.b", true},
		{"a.*", "a.b.c", false},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{"a.*.c", "a.b.*", true},
		{"a.*.c", "a.b.d", false},
		{"x.>", "y.>", false},
		{">", "a", true},
	}
	for _, c := range cases {
		if got := filtersOverlap(c.a, c.b); got != c.want {
			t.Errorf("filtersOverlap(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := filtersOverlap(c.b, c.a); got != c.want {
			t.Errorf("filtersOverlap(%q, %q) = %v, want %v", c.b, c.a, got, c.want)
		}
	}
}

func TestCheckTokens(t *testing.T) {
	for _, s := range []string{"a", "a.b", "asyrevel.run-1.out.3", "a*b.c"} {
		if err := checkSubject(s); err != nil {
			t.Errorf("checkSubject(%q): %v", s, err)
		}
	}
	for _, s := range []string{"", ".", "a.", ".a", "a..b", "a.*", "a.>", "*", "a b", "a\tb", "a\nb"} {
		if err := checkSubject(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("checkSubject(%q) = %v, want ErrInvalid", s, err)
		}
	}
	for _, s := range []string{"a.*", "a.>", ">", "*.*", "a.*.>"} {
		if err := checkFilter(s); err != nil {
			t.Errorf("checkFilter(%q): %v", s, err)
		}
	}
	for _, s := range []string{"", "a.>.b", ">.a", "a..*", "a b.>"} {
		if err := checkFilter(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("checkFilter(%q) = %v, want ErrInvalid", s, err)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, s := range []string{"r", "run-1_A", "0"} {
		if err := checkName("run", s); err != nil {
			t.Errorf("checkName(%q): %v", s, err)
		}
	}
	for _, s := range []string{"", "a.b", "a b", "a*", "a>", "é", string(make([]byte, 129))} {
		if err := checkName("run", s); !errors.Is(err, ErrInvalid) {
			t.Errorf("checkName(%q) = %v, want ErrInvalid", s, err)
		}
	}
}

func TestAckStreamSeq(t *testing.T) {
	cases := []struct {
		reply string
		seq   uint64
		ok    bool
	}{
		{"$JS.ACK.ASYREVEL_r.c1.1.42.7.1700000000000000000.0", 42, true},
		{"$JS.ACK._.HASH.ASYREVEL_r.c1.2.43.8.1700000000000000000.5.tok", 43, true},
		{"$JS.ACK._.HASH.ASYREVEL_r.c1.2.44.8.1700000000000000000.5", 44, true},
		{"_INBOX.abc", 0, false},
		{"$JS.ACK.a.b.c", 0, false},
		{"$JS.ACK.ASYREVEL_r.c1.1.x2.7.17.0", 0, false},
	}
	for _, c := range cases {
		seq, ok := ackStreamSeq(c.reply)
		if seq != c.seq || ok != c.ok {
			t.Errorf("ackStreamSeq(%q) = %d, %v; want %d, %v", c.reply, seq, ok, c.seq, c.ok)
		}
	}
}

func TestAckConsumerSeq(t *testing.T) {
	cases := []struct {
		reply, name string
		seq         uint64
		ok          bool
	}{
		{"$JS.ACK.ASYREVEL_r.c1.1.42.7.1700000000000000000.0", "c1", 7, true},
		{"$JS.ACK._.HASH.ASYREVEL_r.party-1-reply_3.2.43.8.1700000000000000000.5.tok", "party-1-reply_3", 8, true},
		{"$JS.ACK._.HASH.ASYREVEL_r.c1.2.44.9.1700000000000000000.5", "c1", 9, true},
		{"_INBOX.abc", "", 0, false},
		{"$JS.ACK.a.b.c", "", 0, false},
		{"$JS.ACK.ASYREVEL_r.c1.1.2.x7.17.0", "", 0, false},
		{"$JS.ACK.ASYREVEL_r..1.2.7.17.0", "", 0, false},
		{"$JS.ACK.ASYREVEL_r.c1.1.2..17.0", "", 0, false},
	}
	for _, c := range cases {
		name, seq, ok := ackConsumerSeq(c.reply)
		if name != c.name || seq != c.seq || ok != c.ok {
			t.Errorf("ackConsumerSeq(%q) = %q, %d, %v; want %q, %d, %v", c.reply, name, seq, ok, c.name, c.seq, c.ok)
		}
	}
	if n := testing.AllocsPerRun(100, func() { ackConsumerSeq(cases[1].reply) }); n != 0 {
		t.Errorf("ackConsumerSeq allocates %v times", n)
	}
}

func BenchmarkSubjectMatch(b *testing.B) {
	for b.Loop() {
		SubjectMatch("asyrevel.run1.out.*", "asyrevel.run1.out.7")
	}
}

func TestMatcher(t *testing.T) {
	filters := []string{"a", "a.b", "a.*", "a.>", "*", ">", "*.b", "a.*.c", "a.*.>", "asyrevel.r.out.*", "asyrevel.r.out.1"}
	subjects := []string{"a", "b", "a.b", "a.c", "a.b.c", "a.b.d", "x.b", "asyrevel.r.out.1", "asyrevel.r.out.10", "asyrevel.r.reply.1", "a.b.c.d"}
	for _, f := range filters {
		m := newMatcher(f)
		for _, s := range subjects {
			if got, want := m.match(s), SubjectMatch(f, s); got != want {
				t.Errorf("matcher(%q).match(%q) = %v, SubjectMatch = %v", f, s, got, want)
			}
		}
	}
}

func BenchmarkMatcher(b *testing.B) {
	m := newMatcher("asyrevel.run1.out.*")
	for b.Loop() {
		m.match("asyrevel.run1.out.7")
	}
}

func TestFeaturesOf(t *testing.T) {
	for _, tc := range []struct {
		version                          string
		ok, multi, compression, resetAPI bool
	}{
		{"2.15.2", true, true, true, true},
		{"2.14.0-beta.1", true, true, true, true},
		{"2.13.9", true, true, true, false},
		{"2.12.1", true, true, true, false},
		{"2.10.0", true, true, true, false},
		{"2.9.10", true, false, false, false},
		{"3.0.0", true, true, true, true},
		{"2.8.4", false, false, false, false},
		{"1.4.1", false, false, false, false},
		{"", false, false, false, false},
		{"x", false, false, false, false},
	} {
		f, err := featuresOf(tc.version)
		if (err == nil) != tc.ok {
			t.Errorf("%q: error %v", tc.version, err)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrServer) {
				t.Errorf("%q: %v does not wrap ErrServer", tc.version, err)
			}
			continue
		}
		if f.MultiFilter != tc.multi || f.Compression != tc.compression || f.ConsumerReset != tc.resetAPI {
			t.Errorf("%q: %+v", tc.version, f)
		}
		if want := !strings.HasPrefix(tc.version, "2.9.") && !strings.HasPrefix(tc.version, "2.10."); f.AsyncPersist != want {
			t.Errorf("%q: async persist %v", tc.version, f.AsyncPersist)
		}
		if m := f.Missing(); (m == "") != (tc.multi && tc.compression && tc.resetAPI) || m != "" && !strings.Contains(m, tc.version) {
			t.Errorf("%q: missing %q", tc.version, m)
		}
	}
}
