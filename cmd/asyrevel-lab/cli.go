package main

import "github.com/asyrevel/asyrevel/internal/cli"

// The lab's commands speak as asyrevel's do: these are asyrevel's helpers
// (package cli), under the names the commands used when they were part of
// asyrevel.

var errUsage = cli.ErrUsage

type trainFlags = cli.TrainFlags

var (
	newTrainFlags = cli.NewTrainFlags
	newFlagSet    = cli.NewFlagSet
	flagGiven     = cli.FlagGiven
	usageErr      = cli.UsageErr
	didYouMean    = cli.DidYouMean
	plural        = cli.Plural
	newLogger     = cli.NewLogger
	addCSVFlags   = cli.AddCSVFlags
	scaleSets     = cli.ScaleSets
)
