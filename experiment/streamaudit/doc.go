// Package streamaudit reads a run's stream back and counts, from the
// senders' own sequence numbers, the messages that were lost, duplicated
// or left unanswered (Audit). The faults experiment checks every case
// with it, and the resume tests check that a resumed run applied each
// update once. It is lab gear: the production binary's audit is
// 'asyrevel audit verify' (package audit), which checks the signed chains.
package streamaudit
