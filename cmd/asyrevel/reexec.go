package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/asyrevel/asyrevel/replay"
)

type reexecFlags struct {
	on bool
}

func addReexecFlags(fs *flag.FlagSet) *reexecFlags {
	f := &reexecFlags{}
	fs.BoolVar(&f.on, "reexecute", false, "re-execute the aggregator on the recorded party messages and compare its replies")
	return f
}

func (f *reexecFlags) run(ctx context.Context, l *replay.Log, stdout, stderr io.Writer) error {
	return fmt.Errorf("re-execution: not yet")
}
