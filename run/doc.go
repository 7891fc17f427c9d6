// Package run puts one run together: it loads and vertically splits the
// data, starts the broker (an embedded NATS JetStream server by default),
// builds the aggregator and the parties, runs them each on its own
// connection, and writes the results (summary.json, curve.csv, curve.png).
//
// Train runs a whole run in one process; Aggregate and Participate run one
// role each, for runs whose parties are separate processes. Both the
// command line (cmd/asyrevel) and the experiments (package experiment)
// start runs through this package.
//
// A run id names one stream: a run refuses a stream that holds an earlier
// run's messages (ErrRunExists). Store and OpenStore list and remove the
// runs' streams of a broker store. An interrupted run (its context
// cancelled) still writes the summary and the plot of the part that ran,
// and returns them with ErrInterrupted: the place where a checkpoint of
// the models would be written too.
package run
