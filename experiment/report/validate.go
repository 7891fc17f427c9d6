package report

import (
	"fmt"
	"strings"
)

// validateBody: the simulation's request rate against real processes
// under CPU quotas, from validate.csv, and the range it validates.
func validateBody(g *gen) (string, error) {
	v, err := g.table("validate.csv", "set", "parties", "mode", "real_steps", "real_seconds", "sim_steps", "error")
	if err != nil {
		return "", err
	}
	var tab [][]string
	for i := range v.rows {
		secs := v.num(i, "real_seconds")
		used, thr := "-", "-"
		if q := v.num(i, "quota_cpu_seconds"); q > 0 {
			used = f(100*v.num(i, "party_cpu_seconds")/q, 0) + "%"
		}
		if p := v.num(i, "periods"); p > 0 {
			thr = f(100*v.num(i, "throttled_periods")/p, 0) + "%"
		}
		tab = append(tab, []string{v.str(i, "set"), v.str(i, "parties"), v.str(i, "mode"), f(v.num(i, "party_share"), 2), f(secs, 1),
			f(v.num(i, "real_steps")/secs, 0), f(v.num(i, "sim_steps")/secs, 0), signedPct(v.num(i, "error")), signedPct(v.num(i, "error_fluid")),
			f(v.num(i, "sim_steps_cost_model")/secs, 0), signedPct(v.num(i, "error_cost_model")), used, thr,
			f(v.num(i, "cost_model_step_ms"), 3), f(v.num(i, "calibrated_step_ms"), 3), f(v.num(i, "run_step_ms"), 3),
			f(v.num(i, "calibrated_agg_broker_step_ms"), 3), f(v.num(i, "agg_broker_step_ms"), 3), f(v.num(i, "load_average"), 1)})
	}
	var b strings.Builder
	b.WriteString(mdTable([]string{"set", "q", "mode", "party's share of a processor", "trained (s)", "real requests/s", "simulated requests/s", "error",
		"error, each step its CPU over its share", "simulated with the cost model's party step", "its error", "party CPU used of its quota", "periods throttled",
		"party CPU a step (ms): cost model", "calibration run", "this run", "aggregator and broker CPU a step (ms): calibration run", "this run",
		"load average"}, tab))
	b.WriteString("\nData: `validate.csv`. Each party is a separate `asyrevel party` process in a CPU cgroup (cgroup v1 CFS quota: its share of a " +
		"processor a period; the straggler, party q, that share over the straggler factor; the period, the calibration run's length and the " +
		"aggregator's quota are in the settings); the aggregator and an embedded JetStream broker run in the experiment's process, over TCP " +
		"loopback, in a cgroup of their own: every part competes with the machine's other work as one group, whatever its nice value. The " +
		"simulation (`sim.Simulate`) runs the same configuration for as long as the real run trained: each party's step is its CPU cost run " +
		"under its quota as CFS runs it (full speed until the period's budget is spent, then a wait for the next period), each reply the " +
		"aggregator's and broker's CPU cost, and the latency as `fig4_costs.csv` measures it. The costs are measured apart from the runs they " +
		"predict: at each q, a calibration run without party quotas (asynchronous) reads each party process's CPU (/proc) at the first and " +
		"the last evaluation, its steps from the stream, and the experiment process's CPU over the same time: whole processes' CPU a step, " +
		"start-up excluded. The cost model's costs (the kernel and the codec in a tight loop on a thread of their own, what Figure 4 simulates " +
		"with) are beside them, with the error the simulation makes with them. The error is the real rate of answered requests over the " +
		"simulated one, minus 1. Where a party used much less CPU than its quota, something other than its quota (the aggregator, the broker, " +
		"the other jobs on this machine: see the load) held it back.\n\n")
	qs, ok := validatedQs(v)
	if len(ok) == 0 {
		fmt.Fprintf(&b, "Validated range: none. At no q (of %s) are both modes within %.0f%% of the real run: the simulation's times are not validated "+
			"on this machine at these settings.\n", list(qs), 100*validTolerance)
	} else {
		fmt.Fprintf(&b, "Validated range: q = %s (both modes within %.0f%% of the real run, with party costs measured as above). Figure 4's simulated "+
			"times are validated only there; at another q, or with the cost model's party step, they are not.\n", list(ok), 100*validTolerance)
	}
	return b.String(), nil
}
