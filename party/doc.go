// Package party is a party's runtime: it holds one organisation's columns of
// the data and its private local model, and takes AsyREVEL's zeroth-order
// steps.
//
// A party never sends its features, its parameters or its directions. Per
// step it draws a direction u from its private RNG and a batch B of sample
// ids, evaluates its black-box model at w and at w + mu u, and publishes
// PartyOutput{B, c, c_hat}. On the reply it updates
//
//	w <- w - eta (phi/mu) [mean_i(h_bar_i - h_i) + lambda (g(w + mu u) - g(w))] u
//
// with phi = 1 for Gaussian and d for unit-sphere directions. Window
// requests may be in flight (1 is the paper's algorithm); replies arrive in
// request order and are matched by sequence number.
//
// Before training it publishes its outputs for every training sample (the
// aggregator's table starts full) and on request it publishes outputs for
// the training and test sets (evaluation). It talks to the aggregator only
// through a broker.Bus and shares only the schemas package with it.
//
// A refusal addressed to it (or an abort of the run) ends Run with the
// aggregator's reason (ErrRefused, ErrAborted). Its waits are bounded: the
// start within JoinWait of joining, a reply within Wait of the last sign of
// life while requests are in flight (ErrNoProgress); the log says every
// Notice what it waits for.
//
// The baselines run through the same runtime (alt.go, tig.go): SynREVEL
// (Config.Sync: batches drawn from the run's shared seed, one request in
// flight) and TIG (Config.FirstOrder: requests carry c only, the reply's
// gradient dF_0/dc is back-propagated through a model.WhiteBox). A
// straggler's or a simulated machine's step time (Config.Slowdown,
// Config.StepCost) is slept after the step's real compute.
//
// Checkpoints and resume (checkpoint.go): with Config.OnCheckpoint a party
// hands out its state (w_m, random state, sequence numbers, requests in
// flight) at the start, at an interval, when the aggregator asks and when
// interrupted; Resume restores one, and Run reads the party's replies and
// the controls from the start of the stream, skipping what the checkpoint
// applied and sending nothing the stream holds already.
package party
