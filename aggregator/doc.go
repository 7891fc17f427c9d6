// Package aggregator is the aggregator's runtime (the paper's server): it
// holds the labels and the global model F_0, keeps the table C[i][m] of the
// latest output of each party for each training sample, and answers the
// parties' zeroth-order requests.
//
// On each PartyOutput from party m it first stores the fresh outputs c into
// the table, then computes per sample h = F_0(w_0, C[i]) and h_bar with
// c_hat in slot m, replies, and takes its own zeroth-order step on w_0 with
// a private direction u_0. Storing c before computing h matters: computing h
// from the older stored output adds a term that does not shrink with mu and
// makes the estimate diverge.
//
// The defense (Config.Defense, defense.go, leakage.go) is a component the
// aggregator holds: it owns the noise, each label's privacy accounting and
// the leakage scores, and the aggregator calls it at the kernel's seams
// (a request admitted, a reply made, the head's step, a checkpoint). The
// rest of the aggregator's state is grouped by the part of the code that
// keeps it (state.go). Checkpoint files share their envelope and save
// protocol with the parties' (internal/ckpt).
//
// Every reply carries its staleness: the largest number of updates another
// party has made since the slot used for it was written. Every message is
// validated before it touches state (schema version, party id against the
// subject, dimensions, finite values, sample ids in range, increasing
// sequence numbers); a rejected message is logged and counted by reason.
//
// The run has phases: joining (Hellos and each party's initial pass fill
// the table), training (steps, with periodic evaluation on the training and
// test sets), stopping (a final evaluation after the step, time or accuracy
// budget; late requests are counted, not answered) and done (Stop
// broadcast).
//
// A hello that does not fit the run (schema version, outputs per sample,
// sample counts, the fingerprint of the sample ids) refuses that party
// alone: a Control refuse addressed to it says why, and the run waits for
// it to join again. No wait is unbounded or silent: the join phase ends
// after JoinWait without progress, an evaluation after EvalTimeout
// without an answer, each with an abort that tells every party the reason;
// meanwhile the log says every Notice what is awaited. A cancelled context
// ends the run with the result so far (ErrInterrupted).
//
// The baselines run through the same runtime: SynREVEL (Config.Sync,
// sync.go: a round collects one request of every party on the same batch,
// stores all their fresh outputs, answers all of them and steps the head
// once) and TIG (Config.FirstOrder, tig.go: requests carry c only, replies
// carry dF_0/dc of the party's slot, the head steps by its own gradient).
//
// Checkpoints and resume (checkpoint.go): with Config.OnCheckpoint the
// aggregator hands out its state when training starts, at an interval and
// when interrupted (then it tells the parties to save theirs, CtlCheckpoint,
// instead of stopping them); Resume restores a checkpoint, and Run then
// reads the stream: requests applied before the checkpoint are skipped,
// those answered after it are applied again in the order of the recorded
// replies, compared byte for byte, the rest answered. An evaluation stops
// waiting for a party silent for Config.PartyTimeout: it counts as
// departed and is scored with its last outputs until it sends again. A
// training that makes no step for EvalTimeout while evaluations are
// answered pauses the run (ErrStalled).
package aggregator
