package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/run"
)

// LabName is the lab binary's name: asyrevel with the experiments, the
// transport comparisons and the WAN proxies (cmd/asyrevel-lab).
const LabName = "asyrevel-lab"

// findLab finds asyrevel-lab beside the running binary, then on PATH
// (tests point it elsewhere).
var findLab = func() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), LabName)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath(LabName)
	if err != nil {
		return "", fmt.Errorf("%w: asyrevel experiment runs in %s, the lab binary, which is neither beside this asyrevel nor on PATH: "+
			"make lab builds bin/%s (beside bin/asyrevel), or go build -o DIR/%s ./cmd/asyrevel-lab with DIR this binary's folder or on PATH",
			errUsage, LabName, LabName, LabName)
	}
	return p, nil
}

// exitStatus is the exit status of a command handed over to another
// process, which has said why.
type exitStatus int

func (e exitStatus) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// handOver runs "asyrevel experiment ARGS" as "asyrevel-lab experiment
// ARGS": the production binary ships no experiment. With the process's
// own standard streams the lab replaces this process (same pid, signals
// and exit status); otherwise (tests, a system without exec) it runs as a
// child whose exit status this command returns.
func handOver(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	lab, err := findLab()
	if err != nil {
		return err
	}
	argv := append([]string{lab, "experiment"}, args...)
	if stdout == io.Writer(os.Stdout) && stderr == io.Writer(os.Stderr) {
		err := syscall.Exec(lab, argv, os.Environ()) // returns only on failure
		fmt.Fprintf(stderr, "asyrevel: exec %s: %v; running it as a child process\n", lab, err)
	}
	cmd := exec.CommandContext(ctx, lab, argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	// Cancelled, the lab stops as after Ctrl-C: it writes what it has.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && ee.ExitCode() > 0:
		return exitStatus(ee.ExitCode())
	}
	return fmt.Errorf("%s experiment: %w", lab, err)
}

// Command is a command of the command line, for Install.
type Command struct {
	Name string
	Run  func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	// Subs are its subcommands, for the help test and suggestions.
	Subs []string
}

// Install puts c in the command table in place of the command of its
// name (asyrevel-lab's experiment instead of the hand-over), or at its
// end. Call it before Main or Execute.
func Install(c Command) {
	for i := range commands {
		if commands[i].name == c.Name {
			commands[i] = command{name: c.Name, run: c.Run, subs: c.Subs}
			return
		}
	}
	commands = append(commands, command{name: c.Name, run: c.Run, subs: c.Subs})
}

// Execute executes one command line and returns the exit status: 0 on
// success, 1 on a failure, 2 on a usage error.
var Execute = execute

// What asyrevel-lab's commands share with asyrevel's.

// ErrUsage marks a usage error (exit status 2).
var ErrUsage = errUsage

// NewFlagSet is a command's flag set: usage on -h, a short word on a bad
// flag.
var NewFlagSet = newFlagSet

// FlagGiven says whether the command line set the flag.
var FlagGiven = flagGiven

// UsageErr turns a flag parsing error into the command line's usage error.
var UsageErr = usageErr

// DidYouMean suggests the nearest candidate to word (", did you mean ...").
var DidYouMean = didYouMean

// Plural says n what, with an s if n is not 1.
var Plural = plural

// NewLogger is the commands' logger.
var NewLogger = newLogger

// AddCSVFlags adds the flags that read a CSV file.
var AddCSVFlags = addCSVFlags

// ScaleSets fits a scaling on tr and applies it to both sets.
var ScaleSets = scaleSets

// Role says which training flags a command takes.
type Role = role

// The roles of the lab's training commands.
const (
	RoleReference  = roleReference  // asyrevel experiment reference
	RoleFirstOrder = roleFirstOrder // asyrevel experiment firstorder
)

// TrainFlags are the training flags of a role.
type TrainFlags = trainFlags

// NewTrainFlags adds the training flags of role r to fs.
var NewTrainFlags = newTrainFlags

// Parse parses args into the run's configuration.
func (f *trainFlags) Parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	return f.parse(fs, args, stderr)
}

// Config is the run's configuration the flags set.
func (f *trainFlags) Config() *run.Config { return &f.cfg }

// Log is the logger the flags set (--log, --log-json, -v): run.Hooks.Log.
func (f *trainFlags) Log() *zerolog.Logger { return &f.hooks.Log }

// TrainConfig parses `asyrevel train` arguments into the run's
// configuration as the command does, with its check that the run was told
// when to stop (experiment privacy --goal builds each of its runs so).
func TrainConfig(args []string) (run.Config, error) {
	fs := newFlagSet("train", "", io.Discard)
	f := newTrainFlags(fs, roleTrain)
	if err := f.parse(fs, args, io.Discard); err != nil {
		return run.Config{}, err
	}
	if err := f.needBudget(); err != nil {
		return run.Config{}, err
	}
	return f.cfg, nil
}

// DataSplit runs `asyrevel data split ARGS`.
var DataSplit = cmdDataSplit
