// Package serve turns a finished run into predictions: the saved models
// (one file per participant), batch scoring of a data file and an online
// HTTP service.
//
// # Saved models
//
// At the end of a run every participant writes its final model into its own
// output folder: OUT/models/party-M.model for party M and
// OUT/models/aggregator.model for the aggregator (a process that plays one
// role writes only its own file). A File is msgpack (JSON field names),
// starts with the magic "asyrevel-model" and a format version, and records
// the run id, the participant, the model's kind, shapes and parameters (or,
// for an external black-box model, its program and arguments), how raw rows
// are read (format, CSV options and encoding, the party's block of columns
// and the scaling fitted on the training set) and, for the aggregator, the
// classes and their label values. When the run had keys, the file is signed
// by its owner's key (Ed25519 over the file with the signature field empty);
// Load refuses a file whose signature does not verify, and with a roster a
// signer who is not the participant the file names.
//
// # Scoring protocol
//
// Scoring travels through the run's broker on two subjects, so that the
// run's stream records who scored which ids:
//
//	asyrevel.R.score        aggregator -> all parties   schemas.ScoreRequest: seq, ids
//	asyrevel.R.scored.M     party M -> aggregator       schemas.ScoreAnswer: seq, the request's seq, its outputs c for those ids
//
// A party answers with its local model's outputs only; it never sees a
// prediction or a label. The aggregator combines the q answers with its head
// and never sees a feature. With the run's keys both subjects go through
// training's trust layer (package trust; see chain.go): each subject's
// messages are numbered, chained by their sender and signed at intervals,
// and checked by their receiver before it acts, so that asyrevel audit
// verify covers who scored which ids. A party can refuse ids outside an
// allowed list.
//
// Responder is a party in serving mode: it indexes its rows by id at start
// and answers requests. Scorer is the aggregator's side: Score sends one
// request and waits for every party, at most a bounded time (ErrPartyDown
// names the silent parties; ErrUnknownID the organisation that lacks an id).
// Concurrent Score calls share requests (batching) when the request slots
// are busy. Predict scores a whole data file in chunks (asyrevel predict); Service is
// the HTTP front (asyrevel serve): POST /v1/predict, GET /healthz and GET
// /metrics in Prometheus text format.
package serve
