package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync/atomic"
	"syscall"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/run"
)

const usage = `asyrevel trains vertical federated learning models with AsyREVEL: parties
that hold different features of the same samples train one model together by
exchanging only model outputs and losses, over NATS JetStream.

Usage:
  asyrevel train --data PATH [--test PATH] --parties Q --algo A [flags]
                             one whole run in this process (embedded broker,
                             aggregator and Q parties, each with its own
                             connection)
  asyrevel broker [--store DIR] [--port N]
                             run an embedded JetStream broker until interrupted
  asyrevel aggregator --nats URL --run R [training flags]
  asyrevel party --nats URL --run R --id M [training flags]
                             the same run as separate processes
  asyrevel align --inputs LABELS.csv,P1.csv,... --key ID --label Y --out DIR
                             private entity alignment: the rows all organisations
                             hold, without showing any key (docs/align.md)
  asyrevel data inspect PATH samples, features, classes, format, and which column
                             is the label and why (CSV: --label, --categorical, ...)
  asyrevel data fetch NAME   download a data set and check its checksum (--list)
  asyrevel data split ...    write one file per party and a labels file
  asyrevel data verify DIR   check a split folder's checksums and sample ids
  asyrevel data presets      the named preprocessing recipes
  asyrevel store list DIR    the runs a broker store holds, and their size on disk
  asyrevel store rm DIR      remove a store, or one run's stream (--run R)
  asyrevel experiment NAME   reference loops and paper experiments (asyrevel experiment help):
                             handed to asyrevel-lab, beside asyrevel or on PATH (make lab)
  asyrevel replay (--store DIR | --nats URL) --run R --out DIR [--reexecute]
                             a run's log in order: per-party transcripts, summary;
                             re-execution of the aggregator against the recorded replies
  asyrevel attack NAME (--store DIR | --nats URL) --run R --as M --out DIR
                             an attack on a run's recorded traffic, scored (asyrevel attack help)
  asyrevel keys --run R --parties Q --out DIR
                             a run's NATS keys (one secret .nk file per participant)
                             and roster.json; also keys --id, public, roster and
                             server-config (asyrevel keys help)
  asyrevel audit verify (--store DIR | --nats URL) --run R [--roster FILE] [--receipts DIR]
                             check a run's log: every signature and chain, the
                             checkpoints and receipts; exit 0 only when intact
  asyrevel predict --models DIR --data PATH --out predictions.csv
                             score a file with a run's saved models (docs/serving.md);
                             --inputs LABELS.csv,P1.csv,... --key COLUMN scores new rows
                             from the organisations' own files (docs/journey.md)
  asyrevel serve --models DIR --data PATH --listen ADDR
                             the models as an HTTP service; party --serve for a party
  asyrevel help [COMMAND]    this text, or a command's flags
  asyrevel --version         the release, commit and Go version of this binary

Examples:
  asyrevel train --data synthetic --parties 8 --duration 30s --out out/
  asyrevel train --data a9a.gz --test a9a.t.gz --parties 8 --algo asyrevel-gau \
      --batch 64 --window 8 --duration 60s --out out/a9a

Exit status (train, aggregator, party; docs/running.md):
  0      finished
  1      failed, or stopped with nothing to go on from and no signal the cause
         (a stream near its bound with no checkpoints kept)
  2      usage error
  75     paused: the state is saved and the last words give the command that goes on
         (the same command with --resume): Ctrl-C, a full stream or disk, a stalled run
  128+N  stopped by signal N with no state to go on from (130: Ctrl-C, 143: SIGTERM):
         no checkpoints kept, or stopped before training started (the last words
         say how to start the run again)
`

// command is a subcommand of asyrevel. The help test runs every command
// and subcommand listed here: add new ones to the table.
type command struct {
	name string
	run  func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	// subs are its subcommands, if it has any ("data inspect", ...).
	subs []string
}

var commands = []command{
	{name: "train", run: cmdTrain},
	{name: "aggregator", run: cmdAggregator},
	{name: "party", run: cmdParty},
	{name: "broker", run: cmdBroker},
	{name: "align", run: cmdAlign},
	{name: "data", run: cmdData, subs: []string{"inspect", "split", "verify", "fetch", "presets"}},
	{name: "store", run: cmdStore, subs: []string{"list", "rm"}},
	{name: "replay", run: cmdReplay},
	{name: "audit", run: cmdAudit, subs: []string{"verify"}},
	{name: "attack", run: cmdAttack, subs: []string{"sign", "loss", "regression", "derivative", "nudge", "model", "feature", "backdoor", "inflate"}},
	{name: "keys", run: func(_ context.Context, args []string, stdout, stderr io.Writer) error {
		return cmdKeys(args, stdout, stderr)
	},
		subs: []string{"public", "roster", "server-config"}},
	{name: "predict", run: cmdPredict},
	{name: "serve", run: cmdServe},
	{name: "version", run: cmdVersion},
	// asyrevel-lab's; this binary hands the command over (Install).
	{name: "experiment", run: handOver},
}

// signalError is the cause of a run's end by a signal.
type signalError struct{ sig os.Signal }

func (e signalError) Error() string { return e.sig.String() + " signal received" }

// pauser, when set (train), pauses the run on the first signal instead
// of cancelling it (run.Hooks.Pause); it is given the signal.
var pauser atomic.Pointer[func(os.Signal)]

// pauseWords, set with pauser, says what the first signal does to the run
// (trainPauseWords).
var pauseWords atomic.Pointer[string]

// stopWords, when set, says what the command does when a signal stops it
// (serve, broker: there is no run to write); else a run's words.
var stopWords atomic.Pointer[string]

const runStopWords = "stopping; writing what the run has so far (again to quit at once)"

func ptr[T any](v T) *T { return &v }

// exitCode is the shell's code for a process ended by the signal.
func (e signalError) exitCode() int {
	if s, ok := e.sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 130
}

// Main runs the command line of the process (os.Args) and exits with its
// status: asyrevel's main, and asyrevel-lab's after Install.
func Main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal ends the run cleanly: the outputs of the part
		// that ran are written. A run of train pauses (pauser): what is in
		// flight is answered and the log sealed first, a few seconds. A
		// further signal stops at once, the last ends the process.
		sig := <-sigs
		if p := pauser.Load(); p != nil {
			words := "pausing: answering what is in flight, sealing the log, saving the state"
			if w := pauseWords.Load(); w != nil {
				words = *w
			}
			fmt.Fprintf(os.Stderr, "asyrevel: %v: %s (again to stop at once)\n", sig, words)
			(*p)(sig)
			sig = <-sigs
		}
		words := runStopWords
		if w := stopWords.Load(); w != nil {
			words = *w
		}
		fmt.Fprintf(os.Stderr, "asyrevel: %v: %s\n", sig, words)
		cancel(signalError{sig})
		sig = <-sigs
		os.Exit(signalError{sig}.exitCode())
	}()
	progName = os.Args[0]
	os.Exit(profiled(func() int { return execute(ctx, os.Args[1:], os.Stdout, os.Stderr) }))
}

// profiled runs f, with a CPU profile of the whole command written to the
// file ASYREVEL_CPUPROFILE names, if it names one (go tool pprof reads
// it): where an experiment's time goes, in the process that runs it.
func profiled(f func() int) int {
	path := os.Getenv("ASYREVEL_CPUPROFILE")
	if path == "" {
		return f()
	}
	out, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(out)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "asyrevel: ASYREVEL_CPUPROFILE: %v\n", err)
		return f()
	}
	defer func() {
		pprof.StopCPUProfile()
		out.Close()
	}()
	return f()
}

// Exit statuses of a command (the usage text lists them).
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
	// exitPaused: the run paused, its state saved; the same command with
	// --resume goes on (EX_TEMPFAIL of sysexits.h: try again later).
	exitPaused = 75
)

// execute executes one command line and returns the exit status: 0 on
// success, 1 on a failure, 2 on a usage error, exitPaused for a run that
// paused and goes on with --resume, 128+N for one a signal stopped with
// no state saved.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	var err error
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "--version", "-version":
		cmd = "version"
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 && rest[0] != "help" {
			return execute(ctx, append(rest, "-h"), stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return 0
	}
	found := false
	for _, c := range commands {
		if c.name == cmd {
			found = true
			err = c.run(ctx, rest, stdout, stderr)
		}
	}
	if !found {
		fmt.Fprintf(stderr, "asyrevel: unknown command %q%s; 'asyrevel help' lists the commands\n", cmd, didYouMean(cmd, commandNames()))
		return exitUsage
	}
	return exitFor(err, stderr)
}

// exitFor says on stderr how a command that returned err ended (nothing
// for a success) and returns its exit status.
func exitFor(err error, stderr io.Writer) int {
	goOn := "the same command with --resume (and its --run) goes on"
	var hint resumeHint
	if errors.As(err, &hint) {
		goOn = "go on with:\n  " + hint.command
	}
	var handed exitStatus
	var early notStarted
	summary := summaryWords(err)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &handed):
		return int(handed) // the lab's status; it said why
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsageShown):
		return exitUsage
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "asyrevel: %v\n", err)
		return exitUsage
	case errors.As(err, &early):
		// Paused or stopped before training started: no state was saved,
		// and --resume has nothing to go on from. The signal's status, as
		// for a stop with no state saved; 1 if no signal caused it.
		switch {
		case early.noSummary:
			summary = ""
		case !errors.Is(err, run.ErrNoSummary):
			summary = "summary.json says so (not_started); "
		default:
			summary += "; "
		}
		fmt.Fprintf(stderr, "asyrevel: %v\nasyrevel: the run stopped before training started (while its data loaded, its stream was set up or its parties joined): "+
			"no state was saved and there is nothing to resume; %s%s\n", err, summary, early.again)
		var sig signalError
		if errors.As(err, &sig) {
			return sig.exitCode()
		}
		return exitFailed
	case errors.Is(err, broker.ErrStoreWrite) && errors.Is(err, run.ErrInterrupted):
		// The run stopped itself: not a success, and the way on is a
		// resume once the broker's disk has room again.
		fmt.Fprintf(stderr, "asyrevel: %v\nasyrevel: the run stopped when its broker could no longer store messages; %s. "+
			"Once the store can be written again (free space, or --max-store within the free space), it goes on from the last checkpoint: %s\n", err, summary, goOn)
		return exitPaused
	case errors.Is(err, run.ErrStoppedByAggregator):
		// A party: the aggregator stopped the run, its stream nearly
		// full, with no checkpoint to go on from. Not finished, as the
		// aggregator's exit says too.
		fmt.Fprintf(stderr, "asyrevel: %v\nasyrevel: the run did not finish: its aggregator kept no checkpoint to go on from (no --checkpoint-dir, or --checkpoint-every negative), "+
			"and the run's stream holds its stop, so --resume cannot go on. Start every participant again under another --run, with room for the run's stream "+
			"(a larger --max-store, on the broker with --roster; or free disk space) and with --checkpoint-dir so that a pause can be resumed\n", err)
		return exitFailed
	case errors.Is(err, aggregator.ErrNearlyFull) && hint.command == "":
		// No checkpoint on disk (no --checkpoint-dir, train without
		// --out, or --checkpoint-every negative): the run stopped, and
		// --resume has no state to go on from. A failure to finish.
		fmt.Fprintf(stderr, "asyrevel: %v\nasyrevel: the run stopped before its stream filled up; no checkpoint was kept "+
			"(no --checkpoint-dir, or --checkpoint-every negative; train keeps them in --out), so --resume cannot go on; %s. "+
			"Start the run again, under another --run if one was given, with room for its stream (a larger --max-store, on the broker with --roster; or free disk space) "+
			"and with --checkpoint-dir (train: --out) so that a pause can be resumed\n", err, summary)
		return exitFailed
	case errors.Is(err, aggregator.ErrNearlyFull):
		// Not a success: the run needs room to go on.
		fmt.Fprintf(stderr, "asyrevel: %v\nasyrevel: the run paused before its stream filled up: %s; "+
			"%s. Give the stream room (a larger --max-store, on the broker with --roster; or free disk space), "+
			"then %s\n", err, pausedWords(err), summary, goOn)
		return exitPaused
	case (errors.Is(err, aggregator.ErrPaused) || errors.Is(err, errPartyPaused)) && hint.command == "":
		// No checkpoint on disk: the pause stopped the run, and --resume
		// has no state to go on from. The signal's status, as for a stop
		// with no state saved; 1 if no signal caused it.
		fmt.Fprintf(stderr, "asyrevel: %v: %s; no checkpoint was kept (no --checkpoint-dir, or --checkpoint-every negative; train keeps them in --out), "+
			"so --resume cannot go on: start the run again (under another --run if one was given)\n", err, summary)
		var sig signalError
		if errors.As(err, &sig) {
			return sig.exitCode()
		}
		return exitFailed
	case errors.Is(err, aggregator.ErrPaused), errors.Is(err, errPartyPaused):
		fmt.Fprintf(stderr, "asyrevel: run paused: %s; %s; %s\n", pausedWords(err), summary, goOn)
		return exitPaused
	case errors.Is(err, aggregator.ErrStalled) && hint.command == "":
		// No checkpoint on disk: the stall ended the run, and --resume
		// has no state to go on from (the aggregator's own words, which
		// name --resume, assume checkpoints). A failure to finish.
		fmt.Fprintf(stderr, "asyrevel: %v\nasyrevel: the run stopped; %s; no checkpoint was kept "+
			"(no --checkpoint-dir, or --checkpoint-every negative; train keeps them in --out), so --resume cannot go on: "+
			"start the run again (under another --run if one was given), with --checkpoint-dir (train: --out) so that a stall can be resumed\n", err, summary)
		return exitFailed
	case errors.Is(err, aggregator.ErrStalled):
		fmt.Fprintf(stderr, "asyrevel: %v\nasyrevel: the run paused; %s; %s\n", err, summary, goOn)
		return exitPaused
	case errors.Is(err, run.ErrInterrupted):
		// A stop on request (Ctrl-C, SIGTERM): with the state saved the
		// run is paused; without, the signal ended it.
		var sig signalError
		if hint.command == "" && errors.As(err, &sig) {
			fmt.Fprintf(stderr, "asyrevel: %v: %s; no state was saved to go on from (--checkpoint-dir, or train's --out, keeps it)\n", err, summary)
			return sig.exitCode()
		}
		if hint.command == "" {
			goOn = "with checkpoints, --resume goes on"
		}
		fmt.Fprintf(stderr, "asyrevel: %v: %s; %s\n", err, summary, goOn)
		return exitPaused
	default:
		fmt.Fprintf(stderr, "asyrevel: %v\n", err)
		return exitFailed
	}
}

// pausedWords says what a pause with its state saved did: with the trust
// layer, the aggregator answered what was in flight and sealed the log
// before every participant saved its state; without it (run.ErrUnsealed)
// the pause is a stop, and nothing seals the log.
func pausedWords(err error) string {
	if errors.Is(err, run.ErrUnsealed) {
		return "the state saved (the trust layer is off: nothing seals the log)"
	}
	return "what was in flight answered, the log sealed, the state saved"
}

// errPartyPaused ends a party whose run the aggregator paused (its state
// saved): it goes on with --resume, as the aggregator does.
var errPartyPaused = errors.New("the run paused")

// summaryWords says where the part of a run that ran is written: the
// summary, or, when summary.json could not be written (a full disk,
// say), that it was not; for a party, which writes none, its stop line.
func summaryWords(err error) string {
	var party partyEnd
	if errors.As(err, &party) {
		return fmt.Sprintf("party %d's stop line shows the part that ran (a party writes no summary.json)", party.id)
	}
	if errors.Is(err, run.ErrNoSummary) {
		return "summary.json could not be written (above: why); the lines above are all there is of the part that ran"
	}
	return "the summary shows the part that ran"
}

var errUsage = errors.New("usage")
