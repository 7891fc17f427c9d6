// Package delayproxy is a TCP proxy that adds a fixed latency to each
// direction of every connection through it: a slow link between two
// processes on one machine, for measurements, where the kernel's netem
// queueing discipline is not available.
//
// Each direction of a connection has a reader that stamps every chunk it
// reads with the time it arrived and a writer that forwards the chunk once
// the delay has passed since that stamp, in order. The link's bandwidth is
// not limited: chunks read while earlier ones wait are in flight together,
// as on a long-distance link. A connection's two directions close together.
package delayproxy
