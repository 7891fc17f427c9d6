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

// FeaturesOf exposes featuresOf.
var FeaturesOf = featuresOf
