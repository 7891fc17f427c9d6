package schemas

import (
	"bytes"
	"errors"
	"testing"
)

func TestAlignRoundTrip(t *testing.T) {
	m := AlignMsg{Header: Header{Version: Version, Party: 3, Seq: 7}, Phase: AlignEcho, Total: 5, Offset: 2,
		Spec: "s", Width: 4, Features: 9, Parties: 3, Data: bytes.Repeat([]byte{1}, 3*AlignEchoSize)}
	data, err := MarshalAlign(nil, &m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalAlign(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != 7 || got.Party != 3 || got.Items() != 3 || got.Offset != 2 || got.Features != 9 || AlignSeqHead(data) != 7 {
		t.Fatalf("%+v", got)
	}
	for _, bad := range []AlignMsg{
		{Header: m.Header, Phase: AlignSet, Total: 1, Data: make([]byte, 31)},
		{Header: m.Header, Phase: AlignSet, Total: 1, Offset: 1, Data: make([]byte, 32)},
		{Header: m.Header, Phase: 9},
		{Header: m.Header, Phase: AlignAlive, Data: []byte{1}},
		{Header: Header{Version: Version, Party: 1}, Phase: AlignAlive},
	} {
		data, _ := MarshalAlign(nil, &bad)
		if _, err := UnmarshalAlign(data); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	other := m
	other.Version = 2
	data, _ = MarshalAlign(nil, &other)
	if _, err := UnmarshalAlign(data); !errors.Is(err, ErrVersion) {
		t.Errorf("version 2: %v", err)
	}
}

// FuzzUnmarshalAlign: what decodes is well formed (a whole number of
// items within the phase's total) and encodes back to what decodes to
// the same message.
func FuzzUnmarshalAlign(f *testing.F) {
	m := AlignMsg{Header: Header{Version: Version, Party: 1, Seq: 1}, Phase: AlignSet, Total: 2, Data: make([]byte, 64)}
	seed, _ := MarshalAlign(nil, &m)
	f.Add(seed)
	f.Add([]byte{0x90})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := UnmarshalAlign(data)
		if err != nil {
			return
		}
		size := got.Phase.ItemSize()
		if size > 0 && (len(got.Data)%size != 0 || uint64(got.Items())+got.Offset > got.Total) {
			t.Fatalf("accepted a malformed chunk: %+v", got)
		}
		again, err := MarshalAlign(nil, got)
		if err != nil {
			t.Fatal(err)
		}
		back, err := UnmarshalAlign(again)
		if err != nil || back.Seq != got.Seq || back.Phase != got.Phase || !bytes.Equal(back.Data, got.Data) || back.Spec != got.Spec {
			t.Fatalf("round trip: %v %+v %+v", err, back, got)
		}
	})
}
