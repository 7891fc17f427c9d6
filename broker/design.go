package broker

import (
	"fmt"
	"strings"
)

// Design names a way of carrying the runtimes' messages through NATS.
// Every design but DesignCore keeps every message in the run's stream.
type Design string

// The transport designs that the throughput experiment compares.
const (
	// DesignMemory is the in-memory bus (MemoryHub): no broker, the
	// baseline.
	DesignMemory Design = "memory"
	// DesignCore is core NATS publish/subscribe without a stream: no
	// audit log, no history, no flow control; a message to a subscriber
	// that falls behind is dropped (and counted). The broker's ceiling.
	DesignCore Design = "core"
	// DesignCapture (the default) publishes on core NATS and delivers
	// through core subscriptions while the run's stream captures every
	// message in parallel. Nobody waits for the stream on the hot path,
	// but flow control bounds each publisher by the stream's confirmed
	// position: every MarkEvery-th message is published with a JetStream
	// acknowledgement, and a publisher may run at most Window messages
	// ahead of the last one acknowledged, so the stream cannot fall
	// behind and drop. Flush confirms the tail and checks the stream's
	// per-subject counts against what was published. A subscription that
	// wants history (DeliverAll, StartSeq) reads the stream first and
	// hands over to the live feed without a gap or a double.
	DesignCapture Design = "capture"
	// DesignOrdered publishes with asynchronous JetStream acks (nats.go's
	// PublishMsgAsync) and delivers from the stream through ordered
	// consumers without acks: the runtime keeps its position
	// (Delivery.Seq) and resumes with StartSeq.
	DesignOrdered Design = "ordered"
	// DesignAcked is the first design: asynchronous acked publishes and
	// durable consumers with cumulative acks (the broker keeps the
	// position of each named subscription).
	DesignAcked Design = "acked"
)

// DefaultDesign is the design of a Bus whose configuration names none.
const DefaultDesign = DesignCapture

// Designs lists every design, the baseline first.
var Designs = []Design{DesignMemory, DesignCore, DesignCapture, DesignOrdered, DesignAcked}

// ParseDesign checks a design name ("" gives DefaultDesign).
func ParseDesign(s string) (Design, error) {
	if s == "" {
		return DefaultDesign, nil
	}
	for _, d := range Designs {
		if string(d) == s {
			return d, nil
		}
	}
	names := make([]string, len(Designs))
	for i, d := range Designs {
		names[i] = string(d)
	}
	return "", fmt.Errorf("%w: transport design %q: want one of %s", ErrInvalid, s, strings.Join(names, ", "))
}

// Capabilities say what a Bus guarantees beyond the Bus contract.
type Capabilities struct {
	// Log: every message published is stored in the run's log, Count
	// reads it and DeliverAll replays it.
	Log bool
	// Lossless: a message is stored, or Flush reports it (ErrLost or the
	// broker's error); never lost silently.
	Lossless bool
	// StreamOrder: a subscription delivers in stream order. Without it,
	// deliveries keep each publisher's order only.
	StreamOrder bool
	// Seq: every Delivery has its stream sequence (Seq() > 0).
	Seq bool
	// StartSeq: SubscribeOptions.StartSeq is honoured.
	StartSeq bool
	// Durable: the broker keeps the position of a named subscription.
	Durable bool
	// Dedupe: Message.ID deduplicates within the window.
	Dedupe bool
}

// Capabilities of each design.
func (d Design) Capabilities() Capabilities {
	switch d {
	case DesignMemory:
		return Capabilities{Log: true, Lossless: true, StreamOrder: true, Seq: true, StartSeq: true, Durable: true, Dedupe: true}
	case DesignCore:
		return Capabilities{}
	case DesignCapture:
		return Capabilities{Log: true, Lossless: true, StartSeq: true, Dedupe: true}
	case DesignOrdered:
		return Capabilities{Log: true, Lossless: true, StreamOrder: true, Seq: true, StartSeq: true, Dedupe: true}
	case DesignAcked:
		return Capabilities{Log: true, Lossless: true, StreamOrder: true, Seq: true, StartSeq: true, Durable: true, Dedupe: true}
	}
	return Capabilities{}
}
