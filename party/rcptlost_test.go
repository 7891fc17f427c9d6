package party

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
	"github.com/asyrevel/asyrevel/zoo"
)

// rcptBus refuses the receipts while refuse is set (as a publish does
// once an interrupt cancelled the party's context) and confirms every
// flush.
type rcptBus struct {
	broker.Bus
	refuse bool
}

func (b *rcptBus) Publish(ctx context.Context, m *broker.Message) error {
	if b.refuse && strings.Contains(m.Subject, ".rcpt.") {
		return context.Canceled
	}
	return nil
}
func (b *rcptBus) Flush(context.Context) error                   { return nil }
func (b *rcptBus) Count(context.Context, string) (uint64, error) { return 0, nil }

// A seal handled after an interrupt cancelled the party's context: the
// receipt is countersigned and kept, and its publish fails. The party
// then saves no checkpoint: one saved after the seal would resume past
// it, and the log would lack the receipt for good (issue 34: the audit
// after a resumed Ctrl-C said "the log lacks party-2's receipt", once
// under load). Whatever it saves before the lost receipt stands; a party
// whose receipt went out saves as before.
func TestLostReceiptSavesNoCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse bool
		saved  int
	}{
		{"receipt published", false, 1},
		{"receipt publish failed", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, keys, err := trust.GenerateRun("t", 2)
			if err != nil {
				t.Fatal(err)
			}
			saved := 0
			p, err := New(Config{Run: "t", ID: 2, Model: model.NewLinear(6, 1), Train: dense(50, 6), Dist: zoo.Gaussian,
				Mu: 1e-3, LR: zoo.Schedule{Eta0: 0.1}, Batch: 1, Window: 1, Seed: 7, Log: zerolog.Nop(), Key: keys[2], Roster: r,
				Receipts: t.TempDir(), OnCheckpoint: func(*Checkpoint) error { saved++; return nil }})
			if err != nil {
				t.Fatal(err)
			}
			bus := &rcptBus{}
			p.bus, p.ctx = bus, context.Background()
			p.started = true
			if err := p.request(); err != nil { // out.2 seq 1
				t.Fatal(err)
			}
			p.saveCheckpoint(context.Background())
			if saved != 1 {
				t.Fatalf("%d checkpoints saved before the seal, want 1", saved)
			}
			agg, _ := trust.NewOutbox(r, keys[0], trust.Policy{})
			ctl, _ := agg.Publisher(schemas.Subject("t", schemas.KindControl, 0))
			outSubj := schemas.Subject("t", schemas.KindOutput, 2)
			head, _ := p.Outbox().HeadAt(outSubj, 1)
			cp, err := trust.NewCheckpoint("t", 1, false, time.Now(), 0, []trust.Entry{{Subject: outSubj, Seq: 1, Head: head}})
			if err != nil {
				t.Fatal(err)
			}
			if err := cp.Sign(keys[0], trust.AggregatorID); err != nil {
				t.Fatal(err)
			}
			hv, _ := trust.EncodeCheckpointHeader(cp)
			b, err := schemas.NewCodec().Marshal(&schemas.Control{Header: schemas.Header{Version: schemas.Version, Seq: ctl.Next()}, Op: schemas.CtlSeal,
				Round: 1, Reason: cp.Digest().String()})
			if err != nil {
				t.Fatal(err)
			}
			d := &headerDelivery{delivery: delivery{subject: ctl.Subject(), data: slices.Clone(b)}, cp: hv}
			d.sign(ctl.Append(d.data, false))
			bus.refuse = tc.refuse
			p.handle(context.Background(), d)
			if st := p.Stats(); st.Rejected["trust-checkpoint"] != 0 {
				t.Fatalf("the seal was refused: %v", st.Rejected)
			}
			p.saveCheckpoint(context.Background())
			if saved != 1+tc.saved {
				t.Errorf("%d checkpoints saved after the seal, want %d", saved-1, tc.saved)
			}
		})
	}
}
