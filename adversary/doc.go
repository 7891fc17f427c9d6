// Package adversary is the rogue client of `asyrevel experiment
// adversary`: a malicious participant of a run with the trust layer on,
// holding party 1's key, that sends bad messages of every kind on the
// run's real broker (anonymous connections, other parties' subjects,
// reading others' traffic, stream administration, junk, sequence jumps,
// replays, forged signatures, unknown keys, unsigned hellos, reply-subject
// injection, oversized messages), and the experiment that counts what the
// broker refused, what the receivers rejected and what got through.
// ServeAttack adds the serve categories: the run's models served over
// HTTP (package serve) to clients without the right credentials (none,
// forged, expired, another service's or another scope's tokens, over
// their rate), counted as what the service refused and what it answered.
package adversary
