package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/trust"
)

func cmdBroker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("broker", "asyrevel broker [--store DIR] [--port N] [--roster FILE]\n\n"+
		"Runs an embedded NATS server with JetStream until interrupted, for runs whose\n"+
		"aggregator and parties are separate processes. It prints the URL to give them.\n"+
		"With --roster it serves that run alone: it admits only the roster's participants\n"+
		"(each with its --key), each allowed only its own subjects, and creates the run's\n"+
		"stream, which no participant can delete, purge or change.", stderr)
	store := fs.String("store", "asyrevel-store", "store directory (the runs' audit logs)")
	host := fs.String("host", "127.0.0.1", "address to listen on")
	port := fs.Int("port", 4222, "port to listen on (0 = any free port)")
	rosterFile := fs.String("roster", "", "the run's roster.json (`FILE`): admit only its participants (asyrevel keys)")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if err := os.MkdirAll(*store, 0o755); err != nil {
		return err
	}
	st, err := run.OpenStore(*store)
	if err != nil {
		return fmt.Errorf("--store %s: %w", *store, err)
	}
	if len(st.Runs) > 0 {
		fmt.Fprintf(stderr, "the store holds %s already, %s (asyrevel store list %s; a run id cannot be used twice)\n", plural(len(st.Runs), "run"), run.MB(st.Bytes), *store)
	}
	scfg := broker.ServerConfig{Dir: *store, Host: *host, Port: *port}
	var rb *run.RosterBroker
	if *rosterFile != "" {
		r, err := trust.ReadRoster(*rosterFile)
		if err != nil {
			return fmt.Errorf("--roster: %w", err)
		}
		if rb, err = run.NewRosterBroker(r); err != nil {
			return err
		}
		scfg.Configure = rb.Configure
	}
	srv, err := broker.StartServer(ctx, scfg)
	if err != nil {
		return err
	}
	if rb != nil {
		if err := rb.CreateStream(ctx, srv); err != nil {
			srv.Shutdown()
			return err
		}
		fmt.Fprintf(stdout, "run %s: admitting only the %d participants of %s\n", rb.Roster.Run, len(rb.Roster.Participants), *rosterFile)
	}
	fmt.Fprintf(stdout, "broker listening on %s (store %s); interrupt to stop\n", srv.URL(), *store)
	<-ctx.Done()
	srv.Shutdown()
	fmt.Fprintln(stdout, "broker stopped")
	return nil
}
