package run

import (
	"context"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker/bustest"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
	"github.com/asyrevel/asyrevel/zoo"
)

// A resuming party reads its own subjects back from the stream at once,
// each on a consumer of its own: the read of its hello (the first) does
// not wait for the read of its receipts (the last) to begin. Before, it
// read them one after the other, and their round trips to the broker
// added up in its return after a broker outage (issue 35). The hello's
// count waits here until the receipts are counted, which reads one after
// the other never do (the context's deadline only catches that hang). On
// a real broker, with the trust layer.
func TestResumingPartyReadsItsSubjectsAtOnce(t *testing.T) {
	r, keys, err := trust.GenerateRun("t", 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := bustest.Embedded(t, "t", "party-2")
	train := &dataset.Matrix{NRows: 10, NCols: 2, Indptr: make([]int64, 11)}
	for i := range 10 {
		train.Indices = append(train.Indices, 0, 1)
		train.Values = append(train.Values, float32(i)/10, 1)
		train.Indptr[i+1] = int64(len(train.Indices))
	}
	pcfg := party.Config{Run: "t", ID: 2, Model: model.NewLinear(2, 1), Train: train, Dist: zoo.Gaussian,
		Mu: 1e-3, LR: zoo.Schedule{Eta0: 0.1}, Batch: 1, Window: 1, Seed: 7, Log: testLog(t), Key: keys[2], Roster: r}
	p0, err := party.New(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	ck := p0.Checkpoint()
	if !ck.Trust {
		t.Fatal("a checkpoint without the trust layer: no receipts to read")
	}
	p, err := party.New(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	j := &job{hooks: Hooks{Log: testLog(t)}}
	j.Run = "t"
	bus := bustest.NewCountsAtOnce(js, schemas.Subject("t", schemas.KindHello, 2), trust.ReceiptSubject("t", 2))
	if err := resumeParty(ctx, bus, j, p, ck, 2); err != nil {
		t.Fatalf("resuming: %v", err)
	}
}
