package broker

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors shared by every Bus implementation.
var (
	// ErrClosed is returned by calls on a Bus or Subscription after Close.
	ErrClosed = errors.New("broker: closed")
	// ErrDuplicate is returned by Publish when a message with the same ID was
	// already stored within the dedupe window; the message is not stored again.
	// Callers usually treat it as success. Only a Bus that knows at once
	// returns it (the in-memory Bus); an asynchronous one (JetStream) drops
	// the duplicate silently and counts it.
	ErrDuplicate = errors.New("broker: duplicate message id")
	// ErrInvalid reports an unusable argument (empty subject, bad filter,
	// overlapping filters, reserved header, bad durable name).
	ErrInvalid = errors.New("broker: invalid argument")
	// ErrUnsupported is returned by a call that the Bus's design cannot
	// serve: Count on a design without a stream, a start sequence on a
	// design without stream sequences. See Capabilities.
	ErrUnsupported = errors.New("broker: not supported by this transport design")
	// ErrLost reports messages that the Bus knows were not stored (Flush)
	// or not delivered (a subscription that fell behind).
	ErrLost = errors.New("broker: messages lost")
	// ErrServer reports a NATS server that lacks what asyrevel needs
	// (JetStream, or a version older than 2.9).
	ErrServer = errors.New("broker: unusable NATS server")
	// ErrStreamFull reports a publish the run's stream refused because
	// it holds its size limit (JetStreamConfig.MaxBytes): the log is
	// bounded, and never shortened to make room.
	ErrStreamFull = errors.New("broker: the run's stream is full")
	// ErrConnLost is returned by Publish and Flush of a JetStream Bus
	// with EndOnLoss once its connection to the broker has dropped: what
	// was in flight may be lost, and a message published after it could
	// land in the stream behind a hole. The caller starts again from its
	// checkpoint on a new connection (package run does).
	ErrConnLost = errors.New("broker: the connection to the broker was lost")
)

// Message is one message to publish.
type Message struct {
	// Subject is a dot-separated NATS subject without wildcards.
	Subject string
	// ID, if not empty, is the dedupe key (Nats-Msg-Id): a second message
	// with the same ID within the dedupe window is dropped by the broker.
	ID string
	// Header holds extra headers (for example a signature). May be nil.
	// Keys are printable ASCII without ':' and are case-sensitive; values
	// have no line breaks. "Status", "Description" and keys starting with
	// "Nats-" are reserved (ErrInvalid).
	Header map[string]string
	// Data is the payload. Publish copies it before returning, so the caller
	// may reuse the buffer at once.
	Data []byte
}

// Delivery is a message handed to a Handler. It and its Data are valid only
// until the Handler returns; copy what must outlive the call. Data is the
// subscription's own copy: writing into it alters nothing else.
type Delivery interface {
	Subject() string
	Data() []byte
	// ID is the message's dedupe ID ("" if none).
	ID() string
	// Header returns the value of a header set by the publisher ("" if
	// none). Keys are case-sensitive.
	Header(key string) string
	// Seq is the stream sequence number (1-based, increasing in stream
	// order), or 0 where the design delivers without it: the live
	// deliveries of DesignCapture and DesignCore come straight from the
	// publisher, not from the stream (Capabilities.Seq).
	Seq() uint64
	// Ack acknowledges this delivery and every earlier delivery of the same
	// subscription (cumulative). Implementations may defer and coalesce acks,
	// but a durable subscription that is closed and opened again resumes after
	// the last acknowledged delivery. On an ephemeral subscription Ack is a
	// no-op. Ack is safe to call only from the Handler.
	Ack() error
}

// Handler consumes deliveries. Within one subscription it is called from a
// single goroutine, one delivery at a time, in stream order where the
// design has it (Capabilities.StreamOrder), else in the order each
// publisher (each connection) sent its messages; messages of different
// publishers may then interleave differently than in the stream.
type Handler func(ctx context.Context, d Delivery)

// DeliverPolicy chooses where a new subscription starts.
type DeliverPolicy int

const (
	// DeliverAll starts from the first stored message that matches.
	DeliverAll DeliverPolicy = iota
	// DeliverNew starts with messages published after the subscription.
	DeliverNew
)

// SubscribeOptions configures a subscription.
type SubscribeOptions struct {
	// Durable names the subscription. On a design that keeps consumer
	// positions in the broker (Capabilities.Durable) closing and opening
	// it again (from any participant of the run) resumes after the last
	// Ack, and at most one subscription per name may be live; on the
	// others the runtime keeps its own position (Delivery.Seq, StartSeq)
	// and the name is only a label. Empty means ephemeral. Letters,
	// digits, '-' and '_'.
	Durable string
	// Deliver is where a new (not resumed) subscription starts; a resumed
	// durable ignores it.
	Deliver DeliverPolicy
	// StartSeq, if not 0, starts a new subscription at this stream
	// sequence (inclusive) instead of Deliver: the way a runtime resumes
	// from a position it kept itself. Needs Capabilities.StartSeq
	// (ErrUnsupported otherwise).
	StartSeq uint64
	// StreamOnly delivers from the run's stream alone, never from a live
	// subscription to the subjects: for a reader of the log (a resume
	// reading what was stored), who may not be allowed to subscribe to
	// them and wants no live feed. DesignCapture then reads through an
	// ordered consumer.
	StreamOnly bool
}

// Subscription is an active consumer.
type Subscription interface {
	// Close stops delivery. It cancels the Handler's ctx, waits for a Handler
	// call in progress to return, flushes pending acks and is idempotent. No
	// Handler call starts after it returns. It must not be called from the
	// subscription's own Handler.
	Close() error
}

// Bus is the transport the runtimes talk through: an append-only log of
// messages that keeps what was consumed (the audit log). What a Bus
// guarantees beyond the methods' contracts depends on its design; see
// Capabilities.
type Bus interface {
	// Publish stores m. It may return before the broker has confirmed the
	// write (asynchronous, with a bounded window of unconfirmed messages); a
	// later Flush reports any failure. It blocks while the window is full,
	// until ctx is done. It copies m.Data. Safe for concurrent use.
	Publish(ctx context.Context, m *Message) error
	// Flush waits until every message published so far on this Bus is
	// stored, and returns the first failure since the last Flush. Safe for
	// concurrent use.
	Flush(ctx context.Context) error
	// Subscribe starts delivering stored messages whose subjects match any of
	// filters (NATS wildcards * and >; filters must not overlap) to h, from a
	// goroutine of its own. The Handler gets a ctx derived from ctx that is
	// done when the subscription ends: on Close, on Bus.Close, or when ctx is
	// done (which ends the subscription as Close would). Safe for concurrent
	// use.
	Subscribe(ctx context.Context, filters []string, opts SubscribeOptions, h Handler) (Subscription, error)
	// Count is the number of stored messages whose subject matches filter.
	Count(ctx context.Context, filter string) (uint64, error)
	// Close flushes, closes all subscriptions of this Bus and releases its
	// connection. Further calls of the other methods return ErrClosed.
	// Idempotent: the first call reports what failed on the way, later
	// calls return nil. It must not be called from a Handler of this Bus.
	Close() error
}

// DefaultAckWait is how long the broker waits for an ack before delivering
// again to a live subscription.
const DefaultAckWait = 30 * time.Second

// PendingAtStart is how many stored messages sub had to deliver when it
// was made, if its design knows (an ordered consumer whose filters are the
// subscription's; a memory subscription started at a StartSeq): a reader
// of the log from a position knows then when it has read everything that
// was there. ok is false where the count is not known.
func PendingAtStart(sub Subscription) (n uint64, ok bool) {
	if p, is := sub.(interface{ pendingAtStart() (uint64, bool) }); is {
		return p.pendingAtStart()
	}
	return 0, false
}
