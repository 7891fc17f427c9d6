package run

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// Pace of RosterBroker.SealWhenOver.
const (
	sealPoll = time.Second
	// sealQuiet: after the final seal, the stream is sealed once every
	// party's receipt of it is stored, or once nothing has been stored
	// for this long (a party gone for good never countersigns).
	sealQuiet = 30 * time.Second
)

// SealWhenOver watches the run's stream on srv and seals it once the run
// is over: after the aggregator's final seal (a signed checkpoint marked
// final, the last control of the run) and every party's receipt of it, or
// sealQuiet after the last message if a party never countersigns. From
// then on the stream stores nothing more (broker.JetStream.Seal). It
// returns when the stream is sealed (sealed true if by this call), ctx is
// done or the broker cannot be read. A run that paused (its last seal not final) stays open for
// --resume.
func (b *RosterBroker) SealWhenOver(ctx context.Context, srv *broker.Server) (sealed bool, err error) {
	run := b.Roster.Run
	var bus *broker.JetStream
	for {
		bus, err = broker.ConnectJetStream(ctx, broker.JetStreamConfig{Server: srv, InProcess: true, Run: run, Name: trust.OperatorID, NoCreate: true,
			Options: []nats.Option{b.op.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(run, trust.OperatorID))}})
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(sealPoll):
		}
	}
	defer bus.Close()
	js, err := jetstream.New(bus.Conn())
	if err != nil {
		return false, err
	}
	st, err := js.Stream(ctx, broker.StreamName(run))
	if err != nil {
		return false, fmt.Errorf("watching run %s's stream: %w", run, err)
	}
	var (
		last     uint64    // the stream's last sequence at the last look
		changed  time.Time // when it last changed
		final    uint64    // the final checkpoint's number, once stored
		finalSeq uint64
	)
	t := time.NewTicker(sealPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case <-t.C:
		}
		info, err := st.Info(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			continue
		}
		if info.Config.Sealed {
			return false, nil
		}
		if info.State.LastSeq != last {
			last, changed = info.State.LastSeq, time.Now()
			if final == 0 {
				final, finalSeq = b.finalSeal(ctx, st)
			}
			if final == 0 || !b.allReceipts(ctx, st, final, finalSeq) {
				continue
			}
		} else if final == 0 || time.Since(changed) < sealQuiet {
			continue
		}
		if err := bus.Seal(ctx); err != nil {
			return false, err
		}
		return true, nil
	}
}

// finalSeal reads the run's last control message and returns the number
// of the checkpoint it carries, if it is the aggregator's final one (the
// roster's aggregator signed it), and its stream sequence; 0 otherwise.
func (b *RosterBroker) finalSeal(ctx context.Context, st jetstream.Stream) (number, seq uint64) {
	m, err := st.GetLastMsgForSubject(ctx, schemas.Subject(b.Roster.Run, schemas.KindControl, 0))
	if err != nil {
		return 0, 0
	}
	var ctl schemas.Control
	if schemas.NewCodec().Unmarshal(m.Data, &ctl) != nil || ctl.Op != schemas.CtlSeal {
		return 0, 0
	}
	c, err := trust.DecodeCheckpointHeader(m.Header.Get(trust.CheckpointHeader))
	if err != nil || !c.Final || c.Verify(b.Roster) != nil {
		return 0, 0
	}
	return c.Number, m.Sequence
}

// allReceipts reports whether every party's last receipt, stored after
// the final seal at finalSeq, countersigns checkpoint number.
func (b *RosterBroker) allReceipts(ctx context.Context, st jetstream.Stream, number, finalSeq uint64) bool {
	for m := 1; m <= b.Roster.Parties(); m++ {
		msg, err := st.GetLastMsgForSubject(ctx, trust.ReceiptSubject(b.Roster.Run, m))
		if err != nil || msg.Sequence < finalSeq {
			return false
		}
		_, rc, err := trust.ParseReceiptMessage(msg.Data)
		if err != nil || rc.Checkpoint.Number != number || rc.Verify(b.Roster) != nil {
			return false
		}
	}
	return true
}
