// Package broker is the transport the asyrevel runtimes talk through.
//
// A Bus is an append-only log of messages on NATS subjects. Publishing
// stores a message; subscribing delivers messages whose subjects match a
// set of filters to a Handler. Nothing is ever removed: the log of a run
// is also its audit log, read back by package replay.
//
// # Implementations and designs
//
// JetStream (ConnectJetStream) keeps a run's log in the NATS JetStream
// stream ASYREVEL_<run>, which captures asyrevel.<run>.> with limits
// retention, file storage, DenyDelete and DenyPurge. StartServer runs an
// embedded NATS server with JetStream in the process; participants connect
// to it over TCP or through the in-process pipe (JetStreamConfig.InProcess),
// or to an external server or cluster by URL. Each participant has its own
// connection, so each can be its own NATS user with its own permissions.
// ConnectJetStream reads the server's version (2.9 or newer) and falls
// back where a feature is missing (ServerFeatures).
//
// How messages travel is the connection's Design:
//
//   - DesignCapture (the default): core NATS publish and subscribe, the
//     stream capturing every message in parallel; a publisher runs at most
//     a window ahead of what the stream has confirmed, so nothing is lost
//     silently, and the live path never waits for the store. Deliveries
//     keep each publisher's order; a subscription that asks for history
//     reads the stream, then hands over to the live feed.
//   - DesignOrdered: acknowledged asynchronous publishes, ordered consumers
//     without acks; the runtime keeps its own position (Delivery.Seq,
//     SubscribeOptions.StartSeq).
//   - DesignAcked: acknowledged publishes and durable consumers with
//     cumulative acks (the broker keeps each subscription's position).
//   - DesignCore: core NATS alone, no stream: the broker's ceiling, and no
//     audit log.
//
// Capabilities say what each guarantees. MemoryHub is the same log in
// memory, with a Bus handle per participant (MemoryHub.Connect) and every
// capability (stream sequences, dedupe window, cumulative acks with
// durable resume, NATS wildcards); it is the Bus of fast tests and the
// no-broker baseline of throughput comparisons. Every design passes the
// conformance suite in package bustest, held to its Capabilities.
//
// # Publishing
//
// Publish copies the message; the caller may reuse its buffer at once.
// JetStream publishes asynchronously with a bounded window of messages the
// stream has not confirmed (JetStreamConfig.Window): Publish blocks while
// it is full, and Flush waits for the confirmations and reports the first
// failure since the previous Flush (ErrLost for a message the stream did
// not store). The runtimes publish without Message.ID: nothing on the
// default path sends a message twice, and a predictable dedupe id would
// let anyone who may publish on the stream have a real message dropped.
// A message with an ID is deduplicated by the log within the dedupe window:
// the in-memory Bus returns ErrDuplicate, JetStream counts it (Duplicates)
// and returns nil, since its Publish returns before the broker has
// answered (with DesignCapture the live subscribers still see it).
//
// Headers (Message.Header) travel with the message and are read with
// Delivery.Header; a message without headers costs nothing extra, so a
// signature layer can add one to some messages only.
//
// # Subscribing and acknowledging
//
// A Handler runs on the subscription's own goroutine, one delivery at a
// time, in stream order (DesignCapture: in each publisher's order); a
// live subscription sees each message once. The Delivery and its Data are
// valid only during the call (Data is the subscription's own copy, which
// the handler may scribble on).
//
// Ack is cumulative: it acknowledges the delivery and every earlier one of
// the subscription. Only the broker-kept durables of DesignAcked (and the
// memory Bus) keep acks: closing one and subscribing again under the same
// Durable name resumes after the last Ack, whatever Deliver says. With the
// other designs the runtime keeps its position and resumes with StartSeq
// (DesignOrdered: the stream sequence after the last one applied;
// DesignCapture, whose live deliveries carry no sequence: a position at or
// before the first message not applied, skipping by the sender's sequence
// numbers what was applied already).
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
//
// # A run's network
//
// Network is the broker a run talks through (OpenNetwork): the memory
// hub, an external server, or an embedded server or cluster with its
// store. Network.Connect makes each participant's connection, waiting for
// a broker that is not up yet (NetworkConfig.Wait), spreading the
// connections over a cluster's nodes, and retrying without credentials on
// a broker that authenticates nobody.
package broker
