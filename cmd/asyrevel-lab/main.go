package main

import "github.com/asyrevel/asyrevel/internal/cli"

// experimentNames are the experiments, for suggestions and the help test.
var experimentNames = []string{"reference", "firstorder", "central", "throughput", "tta", "scale", "nn", "adversary",
	"privacy", "faults", "soak", "serve", "align", "wan", "fig3", "table3", "table4", "fig4", "validate", "all"}

func init() {
	cli.Install(cli.Command{Name: "experiment", Run: cmdExperiment, Subs: experimentNames})
}

func main() { cli.Main() }
