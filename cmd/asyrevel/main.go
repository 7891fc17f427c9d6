package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
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
  asyrevel data inspect PATH samples, features, classes and format of a data set
  asyrevel data fetch NAME   download a data set and check its checksum (--list)
  asyrevel data split ...    write one file per party and a labels file
  asyrevel data verify DIR   check a split folder's checksums and sample ids
  asyrevel data presets      the named preprocessing recipes
  asyrevel experiment NAME   reference loops and paper experiments (asyrevel experiment help)
  asyrevel replay (--store DIR | --nats URL) --run R --out DIR [--reexecute]
                             a run's log in order: per-party transcripts, summary;
                             re-execution of the aggregator against the recorded replies
  asyrevel attack NAME (--store DIR | --nats URL) --run R --as M --out DIR
                             an attack on a run's recorded traffic, scored (asyrevel attack help)
  asyrevel help [COMMAND]    this text, or a command's flags

Examples:
  asyrevel train --data synthetic --parties 8 --duration 30s --out out/
  asyrevel train --data a9a.gz --test a9a.t.gz --parties 8 --algo asyrevel-gau \
      --batch 64 --window 8 --duration 60s --out out/a9a
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(execute(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// execute executes one command line and returns the exit status: 0 on success,
// 1 on a failure, 2 on a usage error.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "train":
		err = cmdTrain(ctx, rest, stdout, stderr)
	case "aggregator":
		err = cmdAggregator(ctx, rest, stdout, stderr)
	case "party":
		err = cmdParty(ctx, rest, stdout, stderr)
	case "broker":
		err = cmdBroker(ctx, rest, stdout, stderr)
	case "data":
		err = cmdData(ctx, rest, stdout, stderr)
	case "experiment":
		err = cmdExperiment(ctx, rest, stdout, stderr)
	case "replay":
		err = cmdReplay(ctx, rest, stdout, stderr)
	case "attack":
		err = cmdAttack(ctx, rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 && rest[0] != "help" {
			return execute(ctx, []string{rest[0], "-h"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "asyrevel: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "asyrevel: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "asyrevel: %v\n", err)
		return 1
	}
}

var errUsage = errors.New("usage")
