package party

import (
	"bytes"
	"context"
	"errors"
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
	err    error // the refusal (nil: context.Canceled)
}

func (b *rcptBus) Publish(ctx context.Context, m *broker.Message) error {
	if b.refuse && strings.Contains(m.Subject, ".rcpt.") {
		if b.err != nil {
			return b.err
		}
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
			saved := 0
			p, bus, seal := sealedParty(t, zerolog.Nop(), func(*Checkpoint) error { saved++; return nil })
			p.started = true
			if err := p.request(); err != nil { // out.2 seq 1
				t.Fatal(err)
			}
			p.saveCheckpoint(context.Background())
			if saved != 1 {
				t.Fatalf("%d checkpoints saved before the seal, want 1", saved)
			}
			bus.refuse = tc.refuse
			p.handle(context.Background(), seal())
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

// sealedParty is party 2 of run t with the trust layer, on a bus that
// refuses its receipts while refuse is set; seal is a delivery of the
// aggregator's signed checkpoint 1 of the log, which covers the party's
// first request (sent or not).
func sealedParty(t *testing.T, log zerolog.Logger, onCheckpoint func(*Checkpoint) error) (_ *Party, _ *rcptBus, seal func() broker.Delivery) {
	t.Helper()
	r, keys, err := trust.GenerateRun("t", 2)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Run: "t", ID: 2, Model: model.NewLinear(6, 1), Train: dense(50, 6), Dist: zoo.Gaussian,
		Mu: 1e-3, LR: zoo.Schedule{Eta0: 0.1}, Batch: 1, Window: 1, Seed: 7, Log: log, Key: keys[2], Roster: r,
		Receipts: t.TempDir(), OnCheckpoint: onCheckpoint})
	if err != nil {
		t.Fatal(err)
	}
	bus := &rcptBus{}
	p.bus, p.ctx = bus, context.Background()
	return p, bus, func() broker.Delivery {
		t.Helper()
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
		return d
	}
}

// A receipt whose publish a stop cancelled (the party's context done) is
// no error: the party was stopped, before training started or after, and
// the log says so at a lower level. A publish that fails otherwise (the
// context alive, or another cause) is an error, as before. Before, a run
// stopped before training started logged "ERR publishing a receipt ...
// context canceled".
func TestCancelledReceiptIsNoError(t *testing.T) {
	for _, tc := range []struct {
		name      string
		started   bool
		cancelled bool // the party's context is done
		pubErr    error
		errorLine bool // an error-level line is logged
	}{
		{"stopped before training", false, true, context.Canceled, false},
		{"stopped in training", true, true, context.Canceled, false},
		{"publish failed", true, false, errors.New("broker: connection closed"), true},
		{"publish failed while stopping", true, true, errors.New("broker: connection closed"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			p, bus, seal := sealedParty(t, zerolog.New(&out).Level(zerolog.DebugLevel), nil)
			p.started = tc.started
			if err := p.request(); err != nil { // out.2 seq 1
				t.Fatal(err)
			}
			bus.refuse, bus.err = true, tc.pubErr
			if tc.cancelled {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				p.ctx = ctx
			}
			p.handle(context.Background(), seal())
			logged := out.String()
			if !strings.Contains(logged, "receipt") {
				t.Fatalf("nothing logged about the receipt: %s", logged)
			}
			if got := strings.Contains(logged, `"level":"error"`); got != tc.errorLine {
				t.Errorf("an error-level line logged: %v, want %v: %s", got, tc.errorLine, logged)
			}
		})
	}
}
