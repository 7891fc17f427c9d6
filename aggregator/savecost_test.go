package aggregator

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/asyrevel/asyrevel/internal/ckpt"
	"github.com/asyrevel/asyrevel/trust"
)

// BenchmarkCheckpointSave is what a save of an a9a-sized aggregator
// (32,561 labels, 4 parties, trust layer) costs, by part: the snapshot
// under the lock, the encoding, and the seal.
func BenchmarkCheckpointSave(b *testing.B) {
	const n, q = 32561, 4
	a, _, _, keys := trustTest(b, q, n)
	tab := make([]float64, n*q)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range tab {
		tab[i] = rng.NormFloat64()
	}
	train(a, tab)
	for i := range a.ver {
		a.ver[i] = uint32(rng.IntN(100000))
	}
	var c Checkpoint
	a.snapshot(&c)
	b.Run("snapshot", func(b *testing.B) {
		for b.Loop() {
			a.mu.Lock()
			a.snapshot(&c)
			a.mu.Unlock()
		}
	})
	var buf bytes.Buffer
	if err := c.Encode(&buf); err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			buf.Reset()
			if err := c.Encode(&buf); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(buf.Len()), "bytes")
	})
	// Format 3's encoding of the same state: the table value by value.
	b.Run("encode-v3", func(b *testing.B) {
		var v3 bytes.Buffer
		for b.Loop() {
			v3.Reset()
			if err := ckpt.Encode(&v3, checkpointKind, 3, &c); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(v3.Len()), "bytes")
	})
	b.Run("seal", func(b *testing.B) {
		for b.Loop() {
			trust.SealState(keys[0], "t", trust.AggregatorID, buf.Bytes())
		}
	})
}
