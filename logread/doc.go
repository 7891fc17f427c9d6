// Package logread reads back what a run's stream stored, over a
// broker.Bus: every message on a set of subjects, as stored when the read
// starts, handed to a function one at a time.
//
// It is the one reader that the roles and the tools share, below all of
// them: the aggregator's recovery (package aggregator), a party's resume
// and catch-up (packages run and party) and the audit (package run) read
// the stream through it, so none of them reads through another's package.
// Package replay reads a stopped or live log through JetStream directly
// (an ordered consumer, with times and headers); logread is for a role
// that holds only its broker.Bus and the permissions it was given.
//
// A read counts the messages on its filters first (broker.Bus.Count),
// subscribes from the start of the stream and returns once it has handed
// that many to the function; it fails if nothing arrives for Stall while
// messages are still due, rather than waiting for ever on a broker that
// lost them.
package logread
