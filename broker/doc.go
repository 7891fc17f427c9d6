// Package broker is the transport the asyrevel runtimes talk through.
//
// A Bus is an append-only log of messages on NATS subjects. Publishing
// stores a message; subscribing delivers the stored messages whose
// subjects match a set of filters, in stream order, to a Handler. Nothing
// is ever removed: the log of a run is also its audit log, read back by
// package replay.
//
// # Implementations
//
// JetStream (ConnectJetStream) keeps a run's log in the NATS JetStream
// stream ASYREVEL_<run>, which captures asyrevel.<run>.> with limits
// retention, file storage, DenyDelete and DenyPurge. StartServer runs an
// embedded NATS server with JetStream in the process; participants connect
// to it over TCP or through the in-process pipe (JetStreamConfig.InProcess),
// or to an external server or cluster by URL. Each participant has its own
// connection, so each can be its own NATS user with its own permissions.
//
// MemoryHub is the same log in memory, with a Bus handle per participant
// (MemoryHub.Connect). It has the same semantics (stream sequences, dedupe
// window, cumulative acks with durable resume, NATS wildcards) and is the
// Bus of fast tests and the no-broker baseline of throughput comparisons.
//
// Both pass the conformance suite in package bustest.
//
// # Publishing
//
// Publish copies the message; the caller may reuse its buffer at once.
// JetStream publishes asynchronously with a bounded window of messages
// awaiting the broker's ack (JetStreamConfig.MaxPending): Publish blocks
// while the window is full, and Flush waits for the acks and reports the
// first failure since the previous Flush. A message with an ID already
// stored within the dedupe window is dropped by the broker: the in-memory
// Bus returns ErrDuplicate, JetStream counts it (Duplicates) and returns
// nil, since its Publish returns before the broker has answered.
//
// # Subscribing and acknowledging
//
// A Handler runs on the subscription's own goroutine, one delivery at a
// time, in stream order; a live subscription sees each message once. The
// Delivery and its Data are valid only during the call (Data is the
// subscription's own copy, which the handler may scribble on).
//
// Ack is cumulative: it acknowledges the delivery and every earlier one of
// the subscription. Only durable subscriptions keep acks: closing one and
// subscribing again under the same Durable name (from any participant)
// resumes after the last Ack, whatever Deliver says. JetStream coalesces
// acks (one every 256, or 5 ms after the first unsent one) and confirms the
// last one synchronously in Close. A durable subscription that never acks
// starts again from its beginning when reopened; on JetStream one that
// stops acking also stalls after about a million unacknowledged
// deliveries (the consumer's ack-pending limit). On an ephemeral
// subscription Ack is a no-op: there is nothing to resume.
//
// # Closing
//
// Subscription.Close stops delivery, cancels the Handler's context, waits
// for a Handler call in progress and flushes the acks; a Handler is never
// called after Close returns. A subscription also ends when the context
// given to Subscribe is done. Bus.Close closes the Bus's subscriptions,
// flushes its publishes and releases its connection; afterwards every
// method returns ErrClosed. Neither Close may be called from a Handler of
// the subscription (or Bus) being closed.
package broker
