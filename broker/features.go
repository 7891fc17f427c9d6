package broker

import (
	"fmt"
	"strings"
)

// ServerFeatures are the JetStream features of the server a Bus is
// connected to, read from its version at connect. asyrevel needs
// nats-server 2.9 or newer and falls back where a newer feature is
// missing.
type ServerFeatures struct {
	// Version is the server's version string.
	Version string
	// MultiFilter: consumers with several subject filters (2.10). Without
	// it a subscription with several filters reads the run's subjects
	// through one consumer and filters on the client.
	MultiFilter bool
	// Compression: S2 compression of the stream's store (2.10).
	Compression bool
	// ConsumerReset: the API that rewinds a durable consumer to its ack
	// floor (2.14); without it the consumer is recreated there.
	ConsumerReset bool
	// AsyncPersist: the stream's asynchronous persist mode (2.12).
	// Without it the stream writes each message to its file before
	// acknowledging it (PersistSync).
	AsyncPersist bool
	// AtomicPublish: atomic batch publishing (2.12), which the fail-over
	// publisher on a replicated stream uses (batchPub); without it that
	// publisher keeps one message in flight per subject (asyncPub).
	AtomicPublish bool
}

// minMajor.minMinor is the oldest server asyrevel works with: the
// consumer-create API with the filter subject in its name (2.9).
const minMajor, minMinor = 2, 9

// featuresOf reads the features of a server version "x.y.z[-...]". A
// server older than 2.9 or an unreadable version is an error wrapping
// ErrServer.
func featuresOf(version string) (ServerFeatures, error) {
	f := ServerFeatures{Version: version}
	var x, y int
	if _, err := fmt.Sscanf(version, "%d.%d", &x, &y); err != nil {
		return f, fmt.Errorf("%w: cannot read the server version %q", ErrServer, version)
	}
	at := func(major, minor int) bool { return x > major || x == major && y >= minor }
	if !at(minMajor, minMinor) {
		return f, fmt.Errorf("%w: nats-server %s is too old: asyrevel needs %d.%d or newer (JetStream consumers created by name with a filter)",
			ErrServer, version, minMajor, minMinor)
	}
	f.MultiFilter = at(2, 10)
	f.Compression = at(2, 10)
	f.ConsumerReset = at(2, 14)
	f.AsyncPersist = at(2, 12)
	f.AtomicPublish = at(2, 12)
	return f, nil
}

// Missing says in one line what the server lacks and how the Bus copes
// ("" when nothing is missing).
func (f ServerFeatures) Missing() string {
	var m []string
	if !f.MultiFilter {
		m = append(m, "consumers with several filters (one consumer reads the run's subjects and the client filters)")
	}
	if !f.Compression {
		m = append(m, "S2 store compression (the stream is stored uncompressed)")
	}
	if !f.AsyncPersist {
		m = append(m, "asynchronous persistence (each message is written to the store file before it is acknowledged)")
	}
	if !f.ConsumerReset {
		m = append(m, "the consumer reset API (a durable is recreated at its ack floor)")
	}
	if len(m) == 0 {
		return ""
	}
	return "nats-server " + f.Version + " lacks " + strings.Join(m, "; ")
}
