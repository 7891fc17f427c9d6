package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/asyrevel/asyrevel/adversary"
)

func expAdversary(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment adversary", "asyrevel experiment adversary [--quick] [--scale N]\n\n"+
		"Trains on a9a with 8 parties on the embedded broker, with the trust layer on,\n"+
		"while a rogue holding party 1's key sends N bad messages of each category\n"+
		"(anonymous connections, other parties' subjects, reading others' traffic,\n"+
		"stream deletion, purge and limits, junk, sequence jumps, replays, forged\n"+
		"signatures, keys not in the roster, unsigned hellos); then the same run without\nthe rogue, "+
		"and the attacked run's models served over HTTP to clients without the right\n"+
		"credentials (none, forged, expired, another service's or scope's tokens, over rate).\n"+
		"Writes adversary.csv (category, sent, refused_by_broker, rejected_by_receiver,\n"+
		"accepted) and says whether the accuracy moved and the audit of the log passed.", stderr)
	f := newExpFlags(fs)
	scale := fs.Int("scale", 1500, "bad messages per category (the broker-side categories send fewer)")
	log, err := f.parse(fs, args, stderr)
	if err != nil {
		return err
	}
	// Both runs train for the same time, long enough for the attack to be
	// over before the end.
	dur := 20 * time.Second
	if f.quick {
		dur = 8 * time.Second
		if !flagGiven(fs, "scale") {
			*scale = 150
		}
	}
	data, err := a9aData(f, 8)
	if err != nil {
		return err
	}
	serveData, err := f.path("a9a/a9a.t.gz")
	if err != nil {
		return err
	}
	r, err := adversary.Experiment(ctx, adversary.Config{Data: data, Parties: 8, Scale: *scale, Duration: dur, Seed: f.seed, Out: f.out, Log: log, ServeData: serveData})
	if r != nil {
		fmt.Fprint(stdout, r.Text())
	}
	return err
}
