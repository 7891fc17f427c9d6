package report

import (
	"fmt"
	"strings"
)

// Goals of the serving experiment (issue targets, not measurements).
const (
	serveBatchGoal = 200_000 // predictions a second, batch scoring
	serveP99Goal   = 5.0     // ms, online at serveP99Rate a second
	serveP99Rate   = 1000
)

// serveBody: batch predictions a second, online latency at each rate and
// the memory of an id index, from serve.csv.
func serveBody(g *gen) (string, error) {
	t, err := g.table("serve.csv", "kind", "bus", "signed", "rate", "value", "p50_ms", "p99_ms", "p999_ms", "ok", "failed", "note")
	if err != nil {
		return "", err
	}
	link := func(i int) string {
		if bus := t.str(i, "bus"); strings.Contains(bus, "proxy") {
			return strings.ReplaceAll(strings.TrimPrefix(bus, "jetstream-tcp-"), "-", " ")
		}
		return "loopback"
	}
	machine := func(i int) string {
		n := t.str(i, "note")
		if j := strings.LastIndex(n, "load average"); j >= 0 {
			return n[j:]
		}
		return "-"
	}
	var b strings.Builder
	mem := 0.0
	for _, i := range t.where("kind", "batch", "bus", "memory") {
		mem = t.num(i, "value")
	}
	var batch, online, seq [][]string
	for i := range t.rows {
		switch t.str(i, "kind") {
		case "batch":
			v := t.num(i, "value")
			verdict := "met"
			if v < serveBatchGoal {
				verdict = fmt.Sprintf("missed by %s%%", f(100*(1-v/serveBatchGoal), 0))
			}
			batch = append(batch, []string{t.str(i, "bus"), thousands(v), f(v/mem, 2), verdict})
		case "online":
			verdict := "-"
			if t.num(i, "rate") == serveP99Rate {
				verdict = "met"
				if p := t.num(i, "p99_ms"); !(p < serveP99Goal) {
					verdict = "missed"
				}
			}
			online = append(online, []string{t.str(i, "signed"), link(i), f(t.num(i, "rate"), 0), f(t.num(i, "p50_ms"), 2), f(t.num(i, "p99_ms"), 2),
				f(t.num(i, "p999_ms"), 2), t.str(i, "ok"), t.str(i, "failed"), verdict, machine(i)})
		case "sequential":
			seq = append(seq, []string{t.str(i, "signed"), link(i), f(t.num(i, "p50_ms"), 2), f(t.num(i, "p99_ms"), 2), f(t.num(i, "p999_ms"), 2),
				f(t.num(i, "value"), 0) + " µs", machine(i)})
		}
	}
	if len(batch) > 0 {
		fmt.Fprintf(&b, "Batch scoring (`asyrevel predict`'s path: every participant in one process, each party on its own connection; the rows' note: %s):\n\n",
			t.str(t.where("kind", "batch")[0], "note"))
		b.WriteString(mdTable([]string{"bus", "predictions/s", "of the memory bus's", fmt.Sprintf("goal %s/s", thousands(serveBatchGoal))}, batch))
		b.WriteString("\n")
	}
	if len(online) > 0 {
		fmt.Fprintf(&b, "Online (HTTP, single-id requests, open loop at each rate; 8 parties on the embedded broker over TCP loopback, one of them behind a "+
			"latency-adding proxy in the link rows; latency from the scheduled send to the answer read; goal p99 under %s ms at %s/s):\n\n",
			f(serveP99Goal, 0), thousands(serveP99Rate))
		b.WriteString(mdTable([]string{"signed", "link", "rate/s", "p50 ms", "p99 ms", "p99.9 ms", "ok", "failed", "goal", "machine"}, online))
		b.WriteString("\n")
	}
	if len(seq) > 0 {
		b.WriteString("One request at a time (single-id calls of the scorer one after the other, no HTTP):\n\n")
		b.WriteString(mdTable([]string{"signed", "link", "p50 ms", "p99 ms", "p99.9 ms", "CPU a request (all participants)", "machine"}, seq))
		b.WriteString("\n")
	}
	for _, i := range t.where("kind", "memory") {
		fmt.Fprintf(&b, "Memory: %s: %s MB.\n\n", t.str(i, "note"), f(t.num(i, "value")/(1<<20), 1))
	}
	b.WriteString("Data: `serve.csv`. Signed means the run's keys: requests and answers are numbered and chained per subject and signed at " +
		"intervals, as training's messages are, so a request costs each participant a SHA-256 link, not an Ed25519 signature; audit verify " +
		"checks the scoring subjects. The load generator, the HTTP server, the broker and the eight parties share the machine's cores with " +
		"other jobs (the load average is in each row): the tail latencies depend on that load as well as on the service. The link rows put " +
		"one party's broker connection behind a TCP proxy (internal/wan) that delays it as the row's link says.\n")
	return b.String(), nil
}
