package broker

import "time"

// ForceRecreateOnReset makes durable resumes recreate the consumer, as with
// a server older than 2.14, until restore is called.
func ForceRecreateOnReset() (restore func()) {
	recreateOnReset = true
	return func() { recreateOnReset = false }
}

// UnconfirmedPublishes is the number of b's publishes the broker has not
// confirmed yet.
func UnconfirmedPublishes(b *JetStream) int { return b.pub.pending() }

// FeaturesOf exposes featuresOf.
var FeaturesOf = featuresOf

// OrderedLives is how many names the consumers of one prefix take in turn.
const OrderedLives = orderedLives

// RestartOrdered restarts sub's ordered consumers as a reconnect does.
func RestartOrdered(sub Subscription) { restartOrdered(sub) }

// DuplicateWindow sets how long a MemoryHub remembers a message ID for
// dedupe (default 2 minutes, as JetStreamConfig.Duplicates).
func DuplicateWindow(d time.Duration) MemoryOption {
	return func(h *MemoryHub) { h.window = d }
}

// Dir is the embedded broker's store ("" for an external broker or the
// memory bus).
func (n *Network) Dir() string { return n.dir }

// Temporary reports a temporary store, removed by Close.
func (n *Network) Temporary() bool { return n.tmp != "" }
