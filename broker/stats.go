package broker

import (
	"net"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// Stats are the traffic counters of one participant's Bus handle (one
// connection), cumulative since it was connected.
type Stats struct {
	// MsgsOut and BytesOut count the messages published through the
	// handle (Publish calls that returned nil: on JetStream this includes
	// duplicates, which the broker drops later, and messages whose
	// asynchronous store fails) and their payload bytes (Message.Data;
	// headers and IDs not included).
	MsgsOut, BytesOut uint64
	// MsgsIn and BytesIn count the deliveries to the handle's
	// subscriptions (Handler calls) and their payload bytes.
	MsgsIn, BytesIn uint64
	// WireOut and WireIn count the bytes written to and read from the
	// connection to the broker: everything on the wire, TCP or in-process
	// pipe, protocol included (PUB/MSG lines, subjects, reply subjects,
	// headers such as Nats-Msg-Id, the broker's publish acks and flow
	// control, consumer acks, pull requests, pings, JetStream API calls).
	// TLS, if used, is counted as the encrypted bytes. Zero for the
	// in-memory bus, which has no wire, and for a JetStream connection
	// whose options replace the dialer after the Bus's own (see
	// JetStreamConfig.Options).
	WireOut, WireIn uint64
	// Dropped counts live deliveries lost because a subscription fell
	// more than JetStreamConfig.SubscribeBuffer behind (DesignCapture,
	// DesignCore; the stream still holds them with DesignCapture).
	Dropped uint64
	// Reconnects counts the times the connection was restored after a
	// loss (on the core designs, live deliveries in between are missing).
	Reconnects uint64
}

// Add returns the sum of s and o.
func (s Stats) Add(o Stats) Stats {
	return Stats{
		MsgsOut: s.MsgsOut + o.MsgsOut, BytesOut: s.BytesOut + o.BytesOut,
		MsgsIn: s.MsgsIn + o.MsgsIn, BytesIn: s.BytesIn + o.BytesIn,
		WireOut: s.WireOut + o.WireOut, WireIn: s.WireIn + o.WireIn,
		Dropped: s.Dropped + o.Dropped, Reconnects: s.Reconnects + o.Reconnects,
	}
}

// BusStats returns the Stats of b if it keeps them (both Bus
// implementations of this package do).
func BusStats(b Bus) (Stats, bool) {
	if sb, ok := b.(interface{ Stats() Stats }); ok {
		return sb.Stats(), true
	}
	return Stats{}, false
}

// counters are the Bus-level counters shared by both implementations.
type counters struct {
	msgsOut, bytesOut atomic.Uint64
	msgsIn, bytesIn   atomic.Uint64
	wireOut, wireIn   atomic.Uint64
	dropped           atomic.Uint64
}

func (c *counters) published(n int) {
	c.msgsOut.Add(1)
	c.bytesOut.Add(uint64(n))
}

func (c *counters) delivered(n int) {
	c.msgsIn.Add(1)
	c.bytesIn.Add(uint64(n))
}

func (c *counters) stats() Stats {
	return Stats{
		MsgsOut: c.msgsOut.Load(), BytesOut: c.bytesOut.Load(),
		MsgsIn: c.msgsIn.Load(), BytesIn: c.bytesIn.Load(),
		WireOut: c.wireOut.Load(), WireIn: c.wireIn.Load(),
		Dropped: c.dropped.Load(),
	}
}

// countWire is a nats.Option, applied last, that counts the bytes of the
// connection: it wraps the in-process provider or the dialer.
func countWire(c *counters) nats.Option {
	return func(o *nats.Options) error {
		if o.InProcessServer != nil {
			o.InProcessServer = countingProvider{o.InProcessServer, c}
			return nil
		}
		d := o.CustomDialer
		if d == nil {
			if o.Dialer != nil {
				d = o.Dialer
			} else {
				d = &net.Dialer{Timeout: o.Timeout}
			}
		}
		if sd, ok := d.(interface{ SkipTLSHandshake() bool }); ok {
			o.CustomDialer = countingSkipTLSDialer{countingDialer{d, c}, sd}
		} else {
			o.CustomDialer = countingDialer{d, c}
		}
		return nil
	}
}

type countingProvider struct {
	p nats.InProcessConnProvider
	c *counters
}

func (p countingProvider) InProcessConn() (net.Conn, error) {
	conn, err := p.p.InProcessConn()
	if err != nil {
		return nil, err
	}
	return &countingConn{conn, p.c}, nil
}

type countingDialer struct {
	d nats.CustomDialer
	c *counters
}

func (d countingDialer) Dial(network, address string) (net.Conn, error) {
	conn, err := d.d.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &countingConn{conn, d.c}, nil
}

type countingSkipTLSDialer struct {
	countingDialer
	sd interface{ SkipTLSHandshake() bool }
}

func (d countingSkipTLSDialer) SkipTLSHandshake() bool { return d.sd.SkipTLSHandshake() }

type countingConn struct {
	net.Conn
	c *counters
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.c.wireIn.Add(uint64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.c.wireOut.Add(uint64(n))
	return n, err
}
