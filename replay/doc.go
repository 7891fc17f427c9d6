// Package replay reads a run's log back: the JetStream stream ASYREVEL_<run>
// that captured every message of the run, in stream order, decoded into the
// protocol's typed messages. Attacks (package privacy), audits and
// experiments share it.
//
// A log is opened from a live NATS server (Source.URL) or from a stopped
// run's store folder (Source.Store), on which Open starts an embedded
// nats-server without a network listener. A store folder is never written
// to: Open refuses a folder that a live process holds (the broker's store
// lock, or any process with a file of it open) instead of risking the live
// run's files, and says which process holds it.
//
// Reading is an ordered consumer with no acknowledgements (nothing is
// stored on the server for it): Log.Read returns a Reader whose Next yields
// Records (stream sequence, time, subject, kind, sender, headers, raw
// payload and the decoded message) until the end of the log as it was when
// Read was called. Records and their messages are reused between calls of
// Next; Record.Clone keeps one.
//
// On top of the reader: WriteTranscripts writes one CSV per party of what
// that party sent and received, and a summary; Reexecute feeds the
// recorded party messages to a fresh aggregator and checks that it
// computes the recorded replies exactly.
package replay
