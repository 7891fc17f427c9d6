package broker

// ForceRecreateOnReset makes durable resumes recreate the consumer, as with
// a server older than 2.14, until restore is called.
func ForceRecreateOnReset() (restore func()) {
	recreateOnReset = true
	return func() { recreateOnReset = false }
}

// UnconfirmedPublishes is the number of b's publishes the broker has not
// confirmed yet.
func UnconfirmedPublishes(b *JetStream) int { return b.pub.pending() }

// ForceFastBatches makes b publish in fast batches whatever the stream
// allows (to test the fallback).
func ForceFastBatches(b *JetStream) {
	b.pub.mu.Lock()
	b.pub.mode = pubFast
	b.pub.mu.Unlock()
}

// UsesFastBatches reports whether b publishes in fast batches.
func UsesFastBatches(b *JetStream) bool {
	b.pub.mu.Lock()
	defer b.pub.mu.Unlock()
	return b.pub.mode == pubFast
}
