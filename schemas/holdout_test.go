package schemas

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// A call carries the aggregator's hold-out (share and seed) as two fields
// after BatchSeed and Keep: it round-trips, controls without it decode as
// before (HoldOut nil), and an older decoder reads BatchSeed and Keep as
// 0 there and skips the rest.
func TestCallHoldOutRoundTrip(t *testing.T) {
	c := NewCodec()
	call := func(h *HoldOut) *Control {
		return &Control{Header: Header{Version: Version, Party: 2, Seq: 4}, Op: CtlCall, Round: 3, Reason: "bm9uY2U", HoldOut: h}
	}
	for _, tc := range []struct {
		name   string
		m      *Control
		fields int
	}{
		{"share and seed", call(&HoldOut{Share: 0.1, Seed: 1}), fieldsControl + 4},
		{"none said", call(&HoldOut{}), fieldsControl + 4},
		{"huge seed", call(&HoldOut{Share: 0.25, Seed: math.MaxUint64}), fieldsControl + 4},
		{"earlier revision's call", call(nil), fieldsControl},
		{"keep without hold-out", &Control{Header: Header{Version: Version, Seq: 5}, Op: CtlEval, Round: 2, Splits: EvalTest, Keep: 1}, fieldsControl + 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := c.Marshal(tc.m)
			if err != nil {
				t.Fatal(err)
			}
			if got := int(b[0] & 0x0f); b[0]&0xf0 != 0x90 || got != tc.fields {
				t.Errorf("an array of %d fields, want %d", got, tc.fields)
			}
			var raw []any
			if err := msgpack.Unmarshal(b, &raw); err != nil {
				t.Fatal(err)
			}
			if tc.m.HoldOut != nil {
				// What an older decoder reads: BatchSeed 0 and Keep 0 at
				// their places (no effect), then fields it skips.
				if toU(raw[7]) != 0 || toU(raw[8]) != 0 || raw[9] != tc.m.HoldOut.Share || toU(raw[10]) != tc.m.HoldOut.Seed {
					t.Errorf("layout %v", raw)
				}
			}
			var got Control
			if err := c.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&got, tc.m) {
				t.Errorf("decoded %+v (hold-out %+v), want %+v", got, got.HoldOut, tc.m)
			}
			if err := got.Validate(Limits{}); err != nil {
				t.Errorf("validate: %v", err)
			}
		})
	}
	// A control decoded into one that held a hold-out drops it.
	m := &Control{HoldOut: &HoldOut{Share: 0.5}}
	b, _ := c.Marshal(&Control{Header: Header{Version: Version, Seq: 1}, Op: CtlStart})
	if err := c.Unmarshal(b, m); err != nil || m.HoldOut != nil {
		t.Errorf("a start decoded over a call: hold-out %+v, %v", m.HoldOut, err)
	}
}

func toU(v any) uint64 {
	switch x := v.(type) {
	case int8:
		return uint64(x)
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	case uint64:
		return x
	case int64:
		return uint64(x)
	}
	return math.MaxUint64 - 1
}

// Hostile hold-outs: a share that is not a fraction of the rows, or a
// hold-out on another control, is refused by Validate (ErrRange); a share
// without its seed does not decode.
func TestCallHoldOutHostile(t *testing.T) {
	c := NewCodec()
	for _, share := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -0.1, -1e-300, 1, 1.5, 1e308} {
		m := &Control{Header: Header{Version: Version, Party: 2, Seq: 4}, Op: CtlCall, Round: 3, Reason: "n", HoldOut: &HoldOut{Share: share, Seed: 7}}
		b, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var got Control
		if err := c.Unmarshal(b, &got); err != nil {
			t.Fatalf("share %v: decode: %v", share, err)
		}
		if err := got.Validate(Limits{}); !errors.Is(err, ErrRange) {
			t.Errorf("share %v: Validate says %v, want ErrRange", share, err)
		}
	}
	on := &Control{Header: Header{Version: Version, Seq: 4}, Op: CtlEval, Round: 3, Splits: EvalTest, HoldOut: &HoldOut{Share: 0.1}}
	if err := on.Validate(Limits{}); !errors.Is(err, ErrRange) {
		t.Errorf("a hold-out on an eval: %v", err)
	}
	// Hand-made: the share, then no seed, or a string where the seed goes.
	for name, tail := range map[string][]any{
		"no seed":     {uint64(0), uint64(0), 0.1},
		"string seed": {uint64(0), uint64(0), 0.1, "seed"},
	} {
		fields := append([]any{uint64(Version), uint64(2), uint64(4), uint64(CtlCall), uint64(3), uint64(0), "n"}, tail...)
		b, err := msgpack.Marshal(fields)
		if err != nil {
			t.Fatal(err)
		}
		var got Control
		if err := c.Unmarshal(b, &got); !errors.Is(err, ErrDecode) {
			t.Errorf("%s: %v, want ErrDecode", name, err)
		}
	}
}

func TestHoldOutSame(t *testing.T) {
	for _, tc := range []struct {
		a, b *HoldOut
		same bool
	}{
		{nil, nil, true},
		{nil, &HoldOut{Seed: 3}, true}, // no rows either way: the seed chooses none
		{&HoldOut{Share: 0.1, Seed: 1}, &HoldOut{Share: 0.1, Seed: 1}, true},
		{&HoldOut{Share: 0.1, Seed: 1}, &HoldOut{Share: 0.1, Seed: 2}, false},
		{&HoldOut{Share: 0.1, Seed: 1}, &HoldOut{Share: 0.2, Seed: 1}, false},
		{&HoldOut{Share: 0.1, Seed: 1}, nil, false},
	} {
		if got := tc.a.Same(tc.b); got != tc.same {
			t.Errorf("%v same as %v: %v", tc.a, tc.b, got)
		}
	}
}
