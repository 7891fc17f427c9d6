package aggregator

import (
	"context"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
)

// A snapshot counts each party's answered requests and the staleness of
// its replies as the run's own statistics do.
func TestSnapshotPerParty(t *testing.T) {
	a, _ := newTest(t, 3, []int32{1, 1}, model.NewLogistic(3))
	train(a, make([]float64, 6))
	req := func(m int, id uint32) {
		a.answer(m, &schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: uint16(m), Seq: 1},
			IDs: []uint32{id}, C: []float64{0}, CHat: []float64{0}})
	}
	for range 3 {
		req(2, 1)
	}
	req(1, 0) // party 2's slot of sample 0 is 3 updates behind
	req(2, 0)
	req(1, 0) // 1 behind
	s := a.Snapshot(SnapshotOptions{})
	p1, p2, p3 := s.Parties[0], s.Parties[1], s.Parties[2]
	if p1.Answered != 2 || p2.Answered != 4 || p3.Answered != 0 {
		t.Fatalf("answered %d %d %d, want 2 4 0", p1.Answered, p2.Answered, p3.Answered)
	}
	if p1.LastStale != 1 || p1.MaxStale != 3 || p1.MeanStale != 2 {
		t.Fatalf("party 1's staleness: last %d max %d mean %v, want 1 3 2", p1.LastStale, p1.MaxStale, p1.MeanStale)
	}
	if s.MaxStaleness != 3 || s.Replies != 6 || s.Phase != "training" || s.Defense != nil {
		t.Fatalf("snapshot %+v", s)
	}
}

// BenchmarkSnapshot is what a scrape costs the aggregator, under its lock:
// a9a's size (32,561 labels, 8 parties), with and without the privacy
// accounting (noised replies), which a scrape asks for at most every 5 s.
func BenchmarkSnapshot(b *testing.B) {
	const n, q = 32561, 8
	a, err := New(Config{Run: "t", Parties: q, K: 1, Head: model.NewLogisticBias(q), Labels: make([]int32, n), Mu: 1e-3,
		LR: zoo.Schedule{Eta0: 0.01}, Log: zerolog.Nop(), Defense: Defense{Reply: ReplyMean, Clip: 1, Noise: 1}})
	if err != nil {
		b.Fatal(err)
	}
	a.bus, a.ctx = &sink{}, context.Background()
	train(a, make([]float64, n*q))
	for i := range a.def.visits {
		a.def.visits[i] = 1
		a.def.maxP[i] = float32(i % 97)
	}
	// What a scrape with the accounting holds the lock for: the copy.
	b.Run("privacy-under-lock", func(b *testing.B) {
		for b.Loop() {
			a.mu.Lock()
			a.monitorSnapshot()
			a.def.accounts()
			a.mu.Unlock()
		}
	})
	for _, privacy := range []bool{false, true} {
		name := "counters"
		if privacy {
			name = "privacy"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				a.Snapshot(SnapshotOptions{Privacy: privacy})
			}
		})
	}
}
