package schemas

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func sampleMessages() []Message {
	h := func(p uint16) Header { return Header{Version: Version, Party: p, Seq: 7} }
	return []Message{
		&Hello{Header: h(3), Model: "linear", InDim: 16, OutDim: 1, NTrain: 100, NTest: 50, PublicKey: "UABC", IDHash: "ab12"},
		&PartyOutput{Header: h(3), IDs: []uint32{0, 5, 99}, C: []float64{0.5, -1, 2}, CHat: []float64{0.501, -0.999, 2.002}},
		&Reply{Header: h(3), ReqSeq: 6, H: []float64{0.1, 0.2, 0.3}, HBar: []float64{0.11, 0.19, 0.3}, Staleness: 12},
		&Reply{Header: h(3), ReqSeq: 6, Delta: []float64{1e-3, -2e-3, 0}},
		&PartyOutput{Header: h(3), IDs: []uint32{0, 5}, C: []float64{0.5, -1}},
		&Reply{Header: h(3), ReqSeq: 6, Grad: []float64{-0.25, 0.5}, Staleness: 1},
		&EvalOutput{Header: h(3), Round: 2, Split: SplitTest, First: 10, Total: 50, C: []float64{1, 2, 3}},
		&Control{Header: h(0), Op: CtlEval, Round: 2, Splits: EvalTest, Reason: "periodic"},
		&Control{Header: h(3), Op: CtlRefuse, Round: 1, Reason: "party holds 2500 training samples, aggregator 2000"},
	}
}

func fresh(m Message) Message {
	return reflect.New(reflect.TypeOf(m).Elem()).Interface().(Message)
}

func TestRoundTrip(t *testing.T) {
	c := NewCodec()
	c.Wide = true // exact: every vector as float64
	for _, m := range sampleMessages() {
		t.Run(m.Kind().String(), func(t *testing.T) {
			b, err := c.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			got := fresh(m)
			if err := c.Unmarshal(b, got); err != nil {
				t.Fatal(err)
			}
			// Empty and nil slices are the same message.
			norm := func(m Message) Message {
				v := reflect.ValueOf(m).Elem()
				for i := 0; i < v.NumField(); i++ {
					if f := v.Field(i); f.Kind() == reflect.Slice && f.Len() == 0 {
						f.Set(reflect.Zero(f.Type()))
					}
				}
				return m
			}
			if !reflect.DeepEqual(norm(got), norm(m)) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
			}
		})
	}
}

func TestFloatsAreBlobs(t *testing.T) {
	for _, wide := range []bool{true, false} {
		c := NewCodec()
		c.Wide = wide
		ids := make([]uint32, 64)
		for i := range ids {
			ids[i] = uint32(i * 500) // below a9a's 32,561 rows: 15 bits
		}
		m := &PartyOutput{Header: Header{Version, 1, 1}, IDs: ids, C: make([]float64, 64), CHat: make([]float64, 64)}
		b, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		// 64 ids * 4 + 128 floats * 8 (wide), or 64 ids * 15 bits + 128
		// floats * 4 (narrow) bytes of payload, and a few bytes of framing.
		want := 64*4 + 128*8
		if !wide {
			want = 64*15/8 + 128*4
		}
		if len(b) < want || len(b) > want+24 {
			t.Fatalf("wide %v: encoded %d bytes, want about %d", wide, len(b), want)
		}
	}
}

// Narrow vectors keep float32's relative precision, and the differences
// c_hat - c and h_bar - h keep theirs whatever the size of c and h: a
// finite difference of size mu = 1e-3 on outputs of size 100 survives to
// about 1e-7 of itself (a float32 of c_hat alone would keep about 1e-2).
// What decodes is what every receiver computes with: decoding is exact
// and deterministic (decode, encode, decode gives the same values).
func TestNarrowVectors(t *testing.T) {
	c := NewCodec()
	cs := []float64{100.123456789, -3.5e4, 1e-9, 0.5, 7}
	var chat []float64
	for i, x := range cs {
		chat = append(chat, x+1e-3*float64(i+1)*math.Sqrt2)
	}
	m := &PartyOutput{Header: Header{Version, 1, 1}, IDs: []uint32{1, 2, 3, 4, 5}, C: cs, CHat: chat}
	b, err := c.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var got PartyOutput
	if err := c.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for i := range cs {
		if rel := math.Abs(got.C[i]-cs[i]) / math.Abs(cs[i]); rel > 6e-8 {
			t.Errorf("c[%d] = %v, sent %v: relative error %.2g", i, got.C[i], cs[i], rel)
		}
		want, d := chat[i]-cs[i], got.CHat[i]-got.C[i]
		if rel := math.Abs(d-want) / math.Abs(want); rel > 1e-6 {
			t.Errorf("c_hat - c [%d] = %v, sent %v: relative error %.2g", i, d, want, rel)
		}
	}
	b2, err := c.Marshal(&got)
	if err != nil {
		t.Fatal(err)
	}
	var again PartyOutput
	if err := c.Unmarshal(b2, &again); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again.C, got.C) || !reflect.DeepEqual(again.CHat, got.CHat) {
		t.Errorf("decode, encode, decode changed the values: %v %v, then %v %v", got.C, got.CHat, again.C, again.CHat)
	}
	// A value past float32's range is sent as it is (the receiver refuses
	// it as out of range), never turned into an infinity.
	huge := &PartyOutput{Header: Header{Version, 1, 1}, IDs: []uint32{1}, C: []float64{1e300}, CHat: []float64{1e300}}
	b4, _ := c.Marshal(huge)
	var h PartyOutput
	if err := c.Unmarshal(b4, &h); err != nil || h.C[0] != 1e300 || h.CHat[0] != 1e300 {
		t.Errorf("a huge output: %v %v", h.C, err)
	}
	// A difference vector whose length is not its base's is refused.
	bad := &Reply{Header: Header{Version, 1, 1}, ReqSeq: 1, H: []float64{1, 2}, HBar: []float64{1, 2}}
	b3, _ := c.Marshal(bad)
	b3 = append([]byte(nil), b3...)
	var r Reply
	if err := c.Unmarshal(b3, &r); err != nil {
		t.Fatal(err)
	}
}

func TestUnmarshalRejects(t *testing.T) {
	c := NewCodec()
	good, _ := c.Marshal(sampleMessages()[1])
	good = append([]byte(nil), good...)
	cases := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"garbage", []byte("hello world")},
		{"truncated", good[:len(good)-3]},
		{"trailing", append(append([]byte(nil), good...), 0xc0)},
		{"not an array", []byte{0x01}},
		{"too few fields", []byte{0x93, 0x01, 0x01, 0x01}},
		{"huge blob length", []byte{0x96, 0x01, 0x01, 0x01, 0xc6, 0xff, 0xff, 0xff, 0xff}},
		{"odd blob", []byte{0x96, 0x01, 0x01, 0x01, 0xc4, 0x03, 1, 2, 3, 0xc4, 0, 0xc4, 0}},
		{"too big", make([]byte, MaxMessageSize+1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Unmarshal(tc.data, &PartyOutput{})
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("got %v, want ErrDecode", err)
			}
			if Reason(err) != "decode" {
				t.Fatalf("reason %q", Reason(err))
			}
		})
	}
}

func TestOtherVersionIsDecodedThenRejected(t *testing.T) {
	c := NewCodec()
	// A version-2 PartyOutput with a different layout: the decoder must not
	// misread it, and Validate must name the version.
	data := []byte{0x94, 0x02, 0xa3, 'x', 'y', 'z', 0xc0, 0xc0}
	var m PartyOutput
	if err := c.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(Limits{}); !errors.Is(err, ErrVersion) {
		t.Fatalf("got %v, want ErrVersion", err)
	}
}

// fo is lim for the first-order baseline.
func fo(lim Limits) Limits {
	lim.FirstOrder = true
	return lim
}

// A reply without a gradient is written in the 8 fields it had before the
// first-order gradient was added, and decodes with no gradient; one with a
// gradient in 9; a reply with Mean as its ninth field (as an earlier
// version wrote it) still decodes as a mean reply.
func TestReplyOptionalFields(t *testing.T) {
	c := NewCodec()
	b, err := c.Marshal(&Reply{Header: Header{Version, 2, 5}, ReqSeq: 4, Delta: []float64{0.5}, Staleness: 3})
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 0x90|fieldsReply {
		t.Fatalf("a reply without gradient has header %x, want %x", b[0], 0x90|fieldsReply)
	}
	m := Reply{Grad: []float64{9}, Mean: true}
	if err := c.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.ReqSeq != 4 || m.Staleness != 3 || len(m.Delta) != 1 || len(m.Grad) != 0 || m.Mean {
		t.Fatalf("decoded %+v", m)
	}
	if err := m.Validate(Limits{Party: 2, Batch: 1}); err != nil {
		t.Fatal(err)
	}
	b, err = c.Marshal(&Reply{Header: Header{Version, 2, 6}, ReqSeq: 5, Grad: []float64{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 0x90|(fieldsReply+1) {
		t.Fatalf("a reply with a gradient has header %x", b[0])
	}
	if err := c.Unmarshal(b, &m); err != nil || len(m.Grad) != 2 || m.Grad[1] != 2 || m.Mean {
		t.Fatalf("decoded %+v, %v", m, err)
	}
	// The earlier layout: 8 fields and Mean.
	b, err = c.Marshal(&Reply{Header: Header{Version, 2, 7}, ReqSeq: 6, Delta: []float64{0.25}})
	if err != nil {
		t.Fatal(err)
	}
	old := append(append([]byte(nil), b...), 0xc3) // true
	old[0]++
	if err := c.Unmarshal(old, &m); err != nil || !m.Mean || len(m.Grad) != 0 || m.Delta[0] != 0.25 {
		t.Fatalf("decoded %+v, %v", m, err)
	}
	// And the new layout of a mean reply round-trips.
	b, err = c.Marshal(&Reply{Header: Header{Version, 2, 8}, ReqSeq: 7, Delta: []float64{0.5}, Mean: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Unmarshal(b, &m); err != nil || !m.Mean || len(m.Grad) != 0 {
		t.Fatalf("decoded %+v, %v", m, err)
	}
}

func TestExtraFieldsSkipped(t *testing.T) {
	c := NewCodec()
	b, _ := c.Marshal(&Control{Header: Header{Version, 0, 1}, Op: CtlStop})
	b = append([]byte(nil), b...)
	b[0]++                        // one more array element
	b = append(b, 0xa2, 'h', 'i') // an unknown string field
	var m Control
	if err := c.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Op != CtlStop {
		t.Fatalf("op %v", m.Op)
	}
}

func TestValidate(t *testing.T) {
	lim := Limits{Party: 3, K: 1, NTrain: 100, NTest: 50, MaxBatch: 8}
	nan := math.NaN()
	h := Header{Version, 3, 9}
	cases := []struct {
		name string
		m    Message
		lim  Limits
		want error
	}{
		{"output ok", &PartyOutput{Header: h, IDs: []uint32{1, 2}, C: []float64{1, 2}, CHat: []float64{1, 2}}, lim, nil},
		{"output version", &PartyOutput{Header: Header{2, 3, 9}, IDs: []uint32{1}, C: []float64{1}, CHat: []float64{1}}, lim, ErrVersion},
		{"output wrong party", &PartyOutput{Header: Header{Version, 4, 9}, IDs: []uint32{1}, C: []float64{1}, CHat: []float64{1}}, lim, ErrParty},
		{"output seq 0", &PartyOutput{Header: Header{Version, 3, 0}, IDs: []uint32{1}, C: []float64{1}, CHat: []float64{1}}, lim, ErrRange},
		{"output short c", &PartyOutput{Header: h, IDs: []uint32{1, 2}, C: []float64{1}, CHat: []float64{1, 2}}, lim, ErrShape},
		{"output k=2 mismatch", &PartyOutput{Header: h, IDs: []uint32{1}, C: []float64{1}, CHat: []float64{1}}, Limits{Party: 3, K: 2}, ErrShape},
		{"output empty", &PartyOutput{Header: h}, lim, ErrShape},
		{"output batch too big", &PartyOutput{Header: h, IDs: make([]uint32, 9), C: make([]float64, 9), CHat: make([]float64, 9)}, lim, ErrShape},
		{"output id range", &PartyOutput{Header: h, IDs: []uint32{100}, C: []float64{1}, CHat: []float64{1}}, lim, ErrRange},
		{"output nan", &PartyOutput{Header: h, IDs: []uint32{1}, C: []float64{nan}, CHat: []float64{1}}, lim, ErrNonFinite},
		{"output inf", &PartyOutput{Header: h, IDs: []uint32{1}, C: []float64{1}, CHat: []float64{math.Inf(-1)}}, lim, ErrNonFinite},
		{"reply ok", &Reply{Header: h, ReqSeq: 1, H: []float64{1}, HBar: []float64{1}}, Limits{Party: 3, Batch: 1}, nil},
		{"reply delta ok", &Reply{Header: h, ReqSeq: 1, Delta: []float64{1}}, Limits{Party: 3, Batch: 1}, nil},
		{"reply both", &Reply{Header: h, ReqSeq: 1, H: []float64{1}, HBar: []float64{1}, Delta: []float64{1}}, Limits{Party: 3}, ErrShape},
		{"reply wrong batch", &Reply{Header: h, ReqSeq: 1, Delta: []float64{1, 2}}, Limits{Party: 3, Batch: 1}, ErrShape},
		{"reply nan", &Reply{Header: h, ReqSeq: 1, H: []float64{nan}, HBar: []float64{1}}, Limits{Party: 3}, ErrNonFinite},
		{"reply gradient in a zo run", &Reply{Header: h, ReqSeq: 1, Delta: []float64{1}, Grad: []float64{1}}, Limits{Party: 3}, ErrShape},
		{"tig output ok", &PartyOutput{Header: h, IDs: []uint32{1, 2}, C: []float64{1, 2}}, fo(lim), nil},
		{"tig output with c_hat", &PartyOutput{Header: h, IDs: []uint32{1}, C: []float64{1}, CHat: []float64{1}}, fo(lim), ErrShape},
		{"tig output short c", &PartyOutput{Header: h, IDs: []uint32{1, 2}, C: []float64{1}}, fo(lim), ErrShape},
		{"zo output without c_hat", &PartyOutput{Header: h, IDs: []uint32{1}, C: []float64{1}}, lim, ErrShape},
		{"tig reply ok", &Reply{Header: h, ReqSeq: 1, Grad: []float64{1, 2, 3, 4}}, Limits{Party: 3, K: 2, Batch: 2, FirstOrder: true}, nil},
		{"tig reply wrong batch", &Reply{Header: h, ReqSeq: 1, Grad: []float64{1, 2}}, Limits{Party: 3, K: 2, Batch: 2, FirstOrder: true}, ErrShape},
		{"tig reply not a multiple of k", &Reply{Header: h, ReqSeq: 1, Grad: []float64{1, 2, 3}}, Limits{Party: 3, K: 2, FirstOrder: true}, ErrShape},
		{"tig reply with values", &Reply{Header: h, ReqSeq: 1, Delta: []float64{1}, Grad: []float64{1}}, Limits{Party: 3, FirstOrder: true}, ErrShape},
		{"tig reply without gradient", &Reply{Header: h, ReqSeq: 1, Delta: []float64{1}}, Limits{Party: 3, FirstOrder: true}, ErrShape},
		{"tig reply nan", &Reply{Header: h, ReqSeq: 1, Grad: []float64{nan}}, Limits{Party: 3, FirstOrder: true}, ErrNonFinite},
		{"eval ok", &EvalOutput{Header: h, Round: 1, Split: SplitTest, First: 48, Total: 50, C: []float64{1, 2}}, lim, nil},
		{"eval overflow", &EvalOutput{Header: h, Round: 1, Split: SplitTest, First: 49, Total: 50, C: []float64{1, 2}}, lim, ErrRange},
		{"eval total", &EvalOutput{Header: h, Round: 1, Split: SplitTest, First: 0, Total: 49, C: []float64{1}}, lim, ErrShape},
		{"eval split", &EvalOutput{Header: h, Split: 9, Total: 50, C: []float64{1}}, lim, ErrRange},
		{"eval init round", &EvalOutput{Header: h, Round: 3, Split: SplitInit, Total: 100, C: []float64{1}}, lim, ErrRange},
		{"hello ok", &Hello{Header: h, InDim: 16, OutDim: 1, NTrain: 100, NTest: 50}, lim, nil},
		{"hello k", &Hello{Header: h, InDim: 16, OutDim: 2, NTrain: 100, NTest: 50}, lim, ErrShape},
		{"hello n", &Hello{Header: h, InDim: 16, OutDim: 1, NTrain: 99, NTest: 50}, lim, ErrShape},
		{"control ok", &Control{Header: Header{Version, 0, 1}, Op: CtlStart}, Limits{}, nil},
		{"control op", &Control{Header: Header{Version, 0, 1}, Op: 9}, Limits{}, ErrRange},
		{"control pause", &Control{Header: Header{Version, 0, 1}, Op: CtlPause}, Limits{}, nil},
		{"control op after pause", &Control{Header: Header{Version, 0, 1}, Op: CtlPause + 1}, Limits{}, ErrRange},
		{"control op 0", &Control{Header: Header{Version, 0, 1}, Op: 0}, Limits{}, ErrRange},
		{"control eval no split", &Control{Header: Header{Version, 0, 1}, Op: CtlEval}, Limits{}, ErrRange},
		{"control refuse party", &Control{Header: Header{Version, 3, 1}, Op: CtlRefuse, Reason: "r"}, Limits{}, nil},
		{"control refuse all", &Control{Header: Header{Version, 0, 1}, Op: CtlRefuse, Reason: "r"}, Limits{}, nil},
		{"control refuse beyond", &Control{Header: Header{Version, MaxParties + 1, 1}, Op: CtlRefuse}, Limits{}, ErrParty},
		{"control start to a party", &Control{Header: Header{Version, 3, 1}, Op: CtlStart}, Limits{}, ErrParty},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.Validate(tc.lim)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Validate = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestSubjects(t *testing.T) {
	cases := []struct {
		subject string
		kind    Kind
		party   int
		ok      bool
	}{
		{"asyrevel.r1.out.3", KindOutput, 3, true},
		{"asyrevel.r1.join.1", KindHello, 1, true},
		{"asyrevel.r1.reply.8", KindReply, 8, true},
		{"asyrevel.r1.eval.2", KindEval, 2, true},
		{"asyrevel.r1.ctl", KindControl, 0, true},
		{"asyrevel.r2.out.3", 0, 0, false},
		{"asyrevel.r1.out.0", 0, 0, false},
		{"asyrevel.r1.out.03", 0, 0, false},
		{"asyrevel.r1.out.x", 0, 0, false},
		{"asyrevel.r1.foo.1", 0, 0, false},
		{"asyrevel.r1.out", 0, 0, false},
		{"asyrevel.r10.out.1", 0, 0, false},
	}
	for _, tc := range cases {
		k, m, err := ParseSubject("r1", tc.subject)
		if (err == nil) != tc.ok || k != tc.kind || m != tc.party {
			t.Errorf("ParseSubject(%q) = %v %d %v", tc.subject, k, m, err)
		}
		if tc.ok && Subject("r1", k, m) != tc.subject {
			t.Errorf("Subject round trip of %q gave %q", tc.subject, Subject("r1", k, m))
		}
	}
	for _, bad := range []string{"", "a.b", "a b", "a*", "x>"} {
		if CheckRun(bad) == nil {
			t.Errorf("CheckRun(%q) accepted", bad)
		}
	}
	if err := CheckRun("run-1_A"); err != nil {
		t.Error(err)
	}
	if MsgID("r1", 3, 42) != "r1.3.42" {
		t.Error(MsgID("r1", 3, 42))
	}
}

func TestNoAllocations(t *testing.T) {
	c := NewCodec()
	out := &PartyOutput{Header: Header{Version, 1, 1}, IDs: make([]uint32, 64), C: make([]float64, 64), CHat: make([]float64, 64)}
	var in PartyOutput
	b, _ := c.Marshal(out)
	_ = c.Unmarshal(append([]byte(nil), b...), &in)
	d := NewCodec()
	allocs := testing.AllocsPerRun(100, func() {
		b, err := c.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Unmarshal(b, &in); err != nil {
			t.Fatal(err)
		}
		if err := in.Validate(Limits{Party: 1, K: 1, NTrain: 100}); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per marshal+unmarshal+validate, want 0", allocs)
	}
}

func BenchmarkCodec(b *testing.B) {
	for _, batch := range []int{1, 16, 64} {
		out := &PartyOutput{Header: Header{Version, 1, 1}, IDs: make([]uint32, batch), C: make([]float64, batch), CHat: make([]float64, batch)}
		rep := &Reply{Header: Header{Version, 1, 1}, ReqSeq: 1, H: make([]float64, batch), HBar: make([]float64, batch)}
		for _, m := range []Message{out, rep} {
			b.Run(m.Kind().String()+"/batch="+itoa(batch), func(b *testing.B) {
				enc, dec := NewCodec(), NewCodec()
				in := fresh(m)
				var n int
				for b.Loop() {
					data, err := enc.Marshal(m)
					if err != nil {
						b.Fatal(err)
					}
					n = len(data)
					if err := dec.Unmarshal(data, in); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n), "bytes/msg")
			})
		}
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// Every decoder must refuse a payload that is not a whole message of its
// kind, whatever message it decoded before: an empty payload, nil (0xc0) or
// an empty array (0x90) must never leave the previous message in place as
// if it had been received again.
func TestUnmarshalRejectsBadHeadersForEveryKind(t *testing.T) {
	bad := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"nil", []byte{0xc0}},
		{"empty array", []byte{0x90}},
		{"string", []byte{0xa1, 'x'}},
		{"map", []byte{0x80}},
	}
	for _, prev := range sampleMessages() {
		for _, tc := range bad {
			t.Run(prev.Kind().String()+"/"+tc.name, func(t *testing.T) {
				c := NewCodec()
				good, err := c.Marshal(prev)
				if err != nil {
					t.Fatal(err)
				}
				m := fresh(prev)
				if err := c.Unmarshal(append([]byte(nil), good...), m); err != nil {
					t.Fatal(err)
				}
				if err := c.Unmarshal(tc.data, m); !errors.Is(err, ErrDecode) {
					t.Fatalf("got %v, want ErrDecode", err)
				}
			})
		}
	}
}

// A finite but huge value is refused when the receiver sets a bound: a
// party's c of 1e308 would overflow the head's arithmetic.
func TestValidateMaxAbs(t *testing.T) {
	lim := Limits{Party: 1, K: 1, NTrain: 10, MaxAbs: 1e6}
	h := Header{Version: Version, Party: 1, Seq: 1}
	cases := []Message{
		&PartyOutput{Header: h, IDs: []uint32{0}, C: []float64{1e308}, CHat: []float64{1}},
		&PartyOutput{Header: h, IDs: []uint32{0}, C: []float64{1}, CHat: []float64{-2e6}},
		&Reply{Header: h, ReqSeq: 1, H: []float64{1e300}, HBar: []float64{1}},
		&Reply{Header: h, ReqSeq: 1, Delta: []float64{-1e7}},
		&EvalOutput{Header: h, Split: SplitInit, Total: 10, C: []float64{1e9}},
	}
	for _, m := range cases {
		if err := m.Validate(lim); !errors.Is(err, ErrRange) {
			t.Errorf("%s: got %v, want ErrRange", m.Kind(), err)
		}
		lim0 := lim
		lim0.MaxAbs = 0
		if err := m.Validate(lim0); err != nil {
			t.Errorf("%s without a bound: %v", m.Kind(), err)
		}
	}
}

// The aggregator's batches: every sample exactly once per epoch, a
// different order per party and epoch, the same ids for the same
// arguments, and no allocation.
func TestDrawBatchPermutes(t *testing.T) {
	for _, n := range []int{1, 2, 7, 100, 1000, 32561} {
		b := 64
		if n < b {
			b = n
		}
		epochs := 3
		reqs := (epochs*n + b - 1) / b
		seen := make([]int, n)
		buf := make([]uint32, b)
		var first []uint32
		for r := range reqs {
			DrawBatch(buf, 42, 3, uint64(r), n)
			if r == 0 {
				first = append([]uint32(nil), buf...)
			}
			for j, id := range buf {
				if p := r*b + j; p < epochs*n {
					if int(id) >= n {
						t.Fatalf("n %d: id %d out of range", n, id)
					}
					seen[id]++
				}
			}
		}
		for i, c := range seen {
			if c != epochs {
				t.Fatalf("n %d: sample %d drawn %d times in %d epochs", n, i, c, epochs)
			}
		}
		DrawBatch(buf, 42, 3, 0, n)
		for j := range buf {
			if buf[j] != first[j] {
				t.Fatalf("n %d: not deterministic", n)
			}
		}
		if n >= 100 {
			other := make([]uint32, b)
			DrawBatch(other, 42, 4, 0, n)
			same := 0
			for j := range other {
				if other[j] == buf[j] {
					same++
				}
			}
			if same > b/4 {
				t.Errorf("n %d: parties 3 and 4 share %d of %d ids", n, same, b)
			}
		}
	}
	buf := make([]uint32, 64)
	if a := testing.AllocsPerRun(100, func() { DrawBatch(buf, 1, 1, 5, 32561) }); a != 0 {
		t.Errorf("%v allocations", a)
	}
}

// The optional fields of this revision round-trip, and a message without
// them decodes with them zero (not left over from the previous message).
func TestOptionalFields(t *testing.T) {
	c := NewCodec()
	h := Header{Version: Version, Party: 2, Seq: 5}
	mean := &Reply{Header: h, ReqSeq: 4, Delta: []float64{0.25}, Mean: true}
	plain := &Reply{Header: h, ReqSeq: 4, Delta: []float64{0.25, 0.5}}
	start := &Control{Header: Header{Version: Version, Seq: 1}, Op: CtlStart, BatchSeed: 1<<63 + 7}
	stop := &Control{Header: Header{Version: Version, Seq: 2}, Op: CtlStop}
	eval := &Control{Header: Header{Version: Version, Seq: 3}, Op: CtlEval, Round: 9, Splits: EvalTrain, Keep: 7}
	keptStop := &Control{Header: Header{Version: Version, Seq: 4}, Op: CtlStop, Round: 7, Reason: "done"}
	var r Reply
	var ctl Control
	for _, tc := range []struct {
		in  Message
		out Message
		ok  func() bool
	}{
		{mean, &r, func() bool { return r.Mean && len(r.Delta) == 1 && r.Delta[0] == 0.25 }},
		{plain, &r, func() bool { return !r.Mean && len(r.Delta) == 2 }},
		{start, &ctl, func() bool { return ctl.BatchSeed == 1<<63+7 && ctl.Op == CtlStart }},
		{stop, &ctl, func() bool { return ctl.BatchSeed == 0 && ctl.Op == CtlStop }},
		{eval, &ctl, func() bool { return ctl.Keep == 7 && ctl.Round == 9 && ctl.BatchSeed == 0 && ctl.Op == CtlEval }},
		{stop, &ctl, func() bool { return ctl.Keep == 0 && ctl.Round == 0 }},
		{keptStop, &ctl, func() bool { return ctl.Keep == 0 && ctl.Round == 7 && ctl.Reason == "done" }},
	} {
		b, err := c.Marshal(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Unmarshal(append([]byte(nil), b...), tc.out); err != nil || !tc.ok() {
			t.Errorf("%s: %v, decoded %+v", tc.in.Kind(), err, tc.out)
		}
	}
	// A mean reply validates against the request's batch size; a mean
	// reply with several values does not.
	if err := mean.Validate(Limits{Party: 2, Batch: 64}); err != nil {
		t.Errorf("mean reply: %v", err)
	}
	bad := &Reply{Header: h, ReqSeq: 4, Delta: []float64{0.25, 1}, Mean: true}
	if err := bad.Validate(Limits{Party: 2, Batch: 2}); !errors.Is(err, ErrShape) {
		t.Errorf("a mean reply with two values: %v", err)
	}
}

// WireVector and WirePair give exactly what encoding and decoding give,
// bit for bit, in range and past it.
func TestWireMatchesCodec(t *testing.T) {
	c := NewCodec()
	for _, scale := range []float64{1e-3, 1, 1e4, 1e39} {
		cs, ch := make([]float64, 8), make([]float64, 8)
		for i := range cs {
			cs[i] = scale * (float64(i) - 3.3) * math.Pi
			ch[i] = cs[i] + 1e-3*math.Sqrt(float64(i+1))
		}
		b, err := c.Marshal(&PartyOutput{Header: Header{Version, 1, 1}, IDs: make([]uint32, 8), C: cs, CHat: ch})
		if err != nil {
			t.Fatal(err)
		}
		var got PartyOutput
		if err := c.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		WirePair(cs, ch)
		for i := range cs {
			if math.Float64bits(cs[i]) != math.Float64bits(got.C[i]) || math.Float64bits(ch[i]) != math.Float64bits(got.CHat[i]) {
				t.Fatalf("scale %g, [%d]: WirePair %v %v, codec %v %v", scale, i, cs[i], ch[i], got.C[i], got.CHat[i])
			}
		}
	}
}

// Packed ids take the bits of the largest id, round trip exactly for
// every width, and have one encoding: a wider width than needed, padding
// bits set, a count that does not fit the bytes, or a truncated payload
// are refused.
func TestPackedIDs(t *testing.T) {
	c := NewCodec()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		n   int
		max uint32
	}{{1, 0}, {1, 1}, {3, 1}, {64, 32560}, {64, 59999}, {7, 1 << 31}, {256, 1<<32 - 1}, {100, 255}} {
		ids := make([]uint32, tc.n)
		for i := range ids {
			ids[i] = uint32(rng.Uint64N(uint64(tc.max) + 1))
		}
		ids[rng.IntN(tc.n)] = tc.max
		m := &PartyOutput{Header: Header{Version, 1, 1}, IDs: ids, C: make([]float64, tc.n), CHat: make([]float64, tc.n)}
		b, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var got PartyOutput
		if err := NewCodec().Unmarshal(b, &got); err != nil {
			t.Fatalf("%d ids up to %d: %v", tc.n, tc.max, err)
		}
		if !slices.Equal(got.IDs, ids) {
			t.Fatalf("%d ids up to %d: got %v, want %v", tc.n, tc.max, got.IDs, ids)
		}
	}
	// Hand-made payloads: width, count, bits.
	packed := func(payload ...byte) []byte {
		c := NewCodec()
		c.check(c.enc.EncodeExtHeader(extIDs, len(payload)))
		c.buf.Write(payload)
		return append([]byte(nil), c.buf.Bytes()...)
	}
	for _, tc := range []struct {
		name    string
		payload []byte
		want    []uint32
	}{
		{"ok: 5 and 2 in 3 bits", []byte{3, 2, 0b010_101}, []uint32{5, 2}},
		{"too wide: 5 and 2 in 4 bits", []byte{4, 2, 0b0010_0101}, nil},
		{"padding set", []byte{3, 2, 0b1_010_101}, nil},
		{"count past the bytes", []byte{3, 3, 0b010_101}, nil},
		{"bytes past the count", []byte{3, 1, 0b101, 0}, nil},
		{"width 0", []byte{0, 1, 0}, nil},
		{"width 33", []byte{33, 1, 1, 0, 0, 0, 0}, nil},
		{"no count", []byte{3}, nil},
	} {
		c := NewCodec()
		c.data = packed(tc.payload...)
		c.rd.Reset(c.data)
		c.dec.Reset(&c.rd)
		got, err := c.readIDs(nil)
		if tc.want == nil {
			if err == nil {
				t.Errorf("%s: decoded %v, want an error", tc.name, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}
