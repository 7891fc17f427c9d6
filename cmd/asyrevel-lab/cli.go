package main

import (
	"flag"
	"io"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/internal/cli"
)

// The lab's commands speak as asyrevel's do: these are asyrevel's helpers
// (package cli), under the names the commands used when they were part of
// asyrevel.

var errUsage = cli.ErrUsage

type trainFlags = cli.TrainFlags

func newTrainFlags(fs *flag.FlagSet, r cli.Role) *trainFlags { return cli.NewTrainFlags(fs, r) }

func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	return cli.NewFlagSet(name, synopsis, stderr)
}

func flagGiven(fs *flag.FlagSet, name string) bool { return cli.FlagGiven(fs, name) }

func usageErr(err error) error { return cli.UsageErr(err) }

func didYouMean(word string, candidates []string) string { return cli.DidYouMean(word, candidates) }

func plural(n int, what string) string { return cli.Plural(n, what) }

func newLogger(w io.Writer, lvl zerolog.Level, json bool) zerolog.Logger {
	return cli.NewLogger(w, lvl, json)
}

func addCSVFlags(fs *flag.FlagSet, o *dataset.CSVOptions) { cli.AddCSVFlags(fs, o) }

func scaleSets(method dataset.ScaleMethod, tr, te *dataset.Dataset, stderr io.Writer) error {
	return cli.ScaleSets(method, tr, te, stderr)
}
