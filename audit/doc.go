// Package audit checks a run's whole log, as the replay package reads it
// from the stream, against the run's roster with trust.Auditor: every
// message's chain and signature, the signed checkpoints the aggregator
// left in the log, the receipts the parties countersigned in the log and
// the receipt folders they kept outside the broker. `asyrevel audit
// verify` and the adversary experiment use it.
package audit
