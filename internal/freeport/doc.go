// Package freeport picks TCP ports that are free now and that no
// outgoing connection will take before a server listens on them.
//
// The usual way, listening on port 0 and closing, returns a port of the
// kernel's ephemeral range (ip_local_port_range, 32768-60999 on Linux).
// Between the close and the server's listen, any process's outgoing
// connection may be given that port as its local one, and the server then
// fails with "address already in use". Tests that start several brokers
// while other test packages open thousands of connections hit this. Ports
// picked below the ephemeral range are only ever taken by an explicit
// listen.
package freeport
