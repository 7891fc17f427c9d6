// Package adversary is the rogue client of `asyrevel experiment
// adversary`: a malicious participant of a run with the trust layer on,
// holding party 1's key, that sends bad messages of every kind on the
// run's real broker (anonymous connections, other parties' subjects,
// reading others' traffic, stream administration, junk, sequence jumps,
// replays, forged signatures, unknown keys, unsigned hellos, reply-subject
// injection, oversized messages, the run's auditor key's reply subjects),
// the same doors on the other broker forms (doors.go: asyrevel broker
// --roster's server and a stock nats-server configured by keys
// server-config: oversized messages, the auditor's reply subjects, dead
// joins, requests after the end), and the experiment that counts what the
// broker refused, what the receivers rejected and what got through.
// ServeAttack adds the serve categories: the run's models served over
// HTTP (package serve) to clients without the right credentials (none,
// forged, expired, another service's or another scope's tokens, over
// their rate), counted as what the service refused and what it answered.
package adversary
