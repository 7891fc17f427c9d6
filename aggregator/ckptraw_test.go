package aggregator

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/internal/ckpt"
	"github.com/asyrevel/asyrevel/internal/ckpt/ckpttest"
)

// rawTable is c's table of outputs as its values' bits, little-endian.
func rawTable(c *Checkpoint) []byte {
	b := make([]byte, 0, 8*len(c.Table))
	for _, v := range c.Table {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

// The table of outputs (and its versions) goes into the checkpoint as one
// block of raw bytes, not value by value: gob's encoding of a []float64
// was most of a save's cost on a9a (13 ms of about 23), and the adaptive
// period is 50 times that cost, so a resume after a broker outage applied
// again that much more (issue 35). The state decodes back the same,
// every value's bits kept (NaN, -0 and infinities too).
func TestCheckpointTableIsRaw(t *testing.T) {
	a, _, _, _ := ckptRun(t)
	ck := a.Checkpoint()
	ck.Table[0], ck.Table[1], ck.Table[2], ck.Table[3] = math.Copysign(0, -1), math.Inf(-1), math.Inf(1), math.Float64frombits(0x7ff8000000000123)
	file := ckpttest.Encoded(t, ck, DecodeCheckpoint)
	if !bytes.Contains(file, rawTable(ck)) {
		t.Fatal("the checkpoint file does not hold the table of outputs as raw bytes")
	}
	got, err := DecodeCheckpoint(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rawTable(got), rawTable(ck)) {
		t.Fatal("the table decodes to other bits")
	}
	// The rest compared as values (NaN != NaN).
	want := *ck
	want.Table, got.Table = nil, nil
	want.Saved, got.Saved = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, &want) {
		t.Fatalf("decoded %+v\nwant %+v", got, &want)
	}
	if ck.TableRaw != nil || ck.VerRaw != nil {
		t.Fatal("Encode changed the checkpoint it encoded")
	}
}

// A file of format 3 (the table gob-encoded value by value, in the
// envelope) still resumes, bit for bit as the original aggregator.
func TestCheckpointFormat3Resumes(t *testing.T) {
	a, sa, next, deliver := ckptRun(t)
	ck := a.Checkpoint()
	v3 := *ck
	v3.Version = 3
	var buf bytes.Buffer
	must(t, ckpt.Encode(&buf, checkpointKind, 3, &v3))
	got, err := DecodeCheckpoint(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	got.Saved, ck.Saved = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, ck) {
		t.Fatalf("format 3 decoded %+v\nwant %+v", got, ck)
	}
	resumesBitForBit(t, got, a, sa, next, deliver)
}

// A raw table that is not whole values, or a file that holds the table
// both ways, is refused as damaged, never resumed from.
func TestCheckpointRawTableChecked(t *testing.T) {
	a, _, _, _ := ckptRun(t)
	ck := a.Checkpoint()
	enc := func(c Checkpoint, version int) []byte {
		var buf bytes.Buffer
		must(t, ckpt.Encode(&buf, checkpointKind, version, &c))
		return buf.Bytes()
	}
	odd := *ck
	odd.TableRaw, odd.Table = rawTable(ck)[:8*len(ck.Table)-3], nil
	both := *ck
	both.TableRaw = rawTable(ck)
	v3raw := *ck
	v3raw.Version, v3raw.TableRaw, v3raw.Table = 3, rawTable(ck), nil
	ckpttest.Refused(t, DecodeCheckpoint, ErrResume,
		ckpttest.Damaged{Name: "raw table cut mid-value", Data: enc(odd, CheckpointVersion), Want: ckpt.ErrDamaged},
		ckpttest.Damaged{Name: "table held both ways", Data: enc(both, CheckpointVersion), Want: ckpt.ErrDamaged},
		ckpttest.Damaged{Name: "format 3 with a raw table", Data: enc(v3raw, 3), Want: ckpt.ErrDamaged})
}
