package report

import (
	"fmt"
	"strings"
)

// table3Body: the bytes of a round and its round trip, from table3.csv.
func table3Body(g *gen) (string, error) {
	t, err := g.table("table3.csv", "set", "method", "k", "payload_up_bytes", "payload_down_bytes", "wire_bytes_per_round", "round_ms")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	var tab [][]string
	payload := func(i int) float64 { return t.num(i, "payload_up_bytes") + t.num(i, "payload_down_bytes") }
	for i := range t.rows {
		tab = append(tab, []string{t.str(i, "set"), t.str(i, "method"), t.str(i, "k"), f(t.num(i, "payload_up_bytes"), 0), f(t.num(i, "payload_down_bytes"), 0),
			f(payload(i), 0), f(t.num(i, "wire_bytes_per_round"), 0), f(t.num(i, "round_ms"), 2)})
	}
	b.WriteString(mdTable([]string{"set", "method", "k", "payload up (B)", "payload down (B)", "payload a round (B)",
		"on the broker a round (B)", "round trip (ms)"}, tab))
	b.WriteString("\nData: `table3.csv`. A round is one request and its reply for a batch of samples (the batch is in the CSV). Payload: the encoded " +
		"request and reply; on the broker: the bytes of every client connection to the embedded JetStream server a round (publish, stream " +
		"storage acknowledgement, delivery, consumer acknowledgement, headers and subjects), measured as the difference between two runs " +
		"that differ only in their number of steps; round trip: from a party's request to its reply, one request in flight. What travels, " +
		"per sample: a zeroth-order request carries the sample id, c and c_hat (k values each), its reply h and h_bar (one value each; " +
		"with --delta their difference alone); a TIG request carries the sample id and c (k values), its reply dF_0/dc (k values), " +
		"a gradient, which is what label-inference attacks on split learning use.\n\n")
	for _, set := range t.distinct("set", nil) {
		var zo, delta, tig = -1, -1, -1
		for _, i := range t.where("set", set) {
			switch m := t.str(i, "method"); {
			case strings.Contains(m, "--delta"):
				delta = i
			case strings.HasPrefix(m, "AsyREVEL"):
				zo = i
			case m == "TIG":
				tig = i
			}
		}
		if zo < 0 || tig < 0 {
			continue
		}
		fmt.Fprintf(&b, "- %s (k = %s): a zeroth-order round carries %s the payload of a TIG round", set, t.str(zo, "k"), times(payload(zo)/payload(tig)))
		if delta >= 0 {
			fmt.Fprintf(&b, " (%s with --delta)", times(payload(delta)/payload(tig)))
		}
		fmt.Fprintf(&b, " and %s its bytes on the broker; its round trip takes %s as long.\n",
			times(t.num(zo, "wire_bytes_per_round")/t.num(tig, "wire_bytes_per_round")), times(t.num(zo, "round_ms")/t.num(tig, "round_ms")))
	}
	b.WriteString("\nThe paper presents the zeroth-order framework's communication as inexpensive next to frameworks that transmit gradients; " +
		"the ratios above are this wire format's, a round against a round. The round trips are single measurements on a shared machine " +
		"(its load is given with the run).\n")
	return b.String(), nil
}
