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
// A run's settings are a Config, plain data that a run file or JSON can
// hold; what a program plugs into a run (callbacks, data already loaded,
// attackers, the pause) is its Hooks, a separate argument. The data are
// loaded by package dataset (dataset.LoadVertical) and the broker is
// started and dialled by package broker (broker.Network); run adds what
// is the run's own.
//
// The files: run.go the three entry points (Train, Aggregate,
// Participate); config.go the settings, their defaults and checks;
// hooks.go the Hooks; data.go the data's loading; network.go the broker
// network of a run; participants.go the aggregator and parties built
// from a Config; resume.go a party's resume from the stream; summary.go
// and finish.go the summary and the end of a run.
//
// A run id names one stream: a run refuses a stream that holds an earlier
// run's messages (ErrRunExists), unless Config.Resume asks to go on with
// it. Store and OpenStore list and remove the runs' streams of a broker
// store. An interrupted run (its context cancelled) still writes the
// summary and the plot of the part that ran, and returns them with
// ErrInterrupted.
//
// With Config.CheckpointDir, every participant saves its state there
// (checkpoint.go) and Config.Resume restarts it from its checkpoint and
// the run's stream: the stream is the truth, the checkpoint shortens the
// replay. (The lab's experiment/streamaudit reads a run's stream back and
// counts what the senders' sequence numbers say was lost, duplicated or
// left unanswered.)
package run
