package observe

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// registerRuntime adds the Go runtime's and the process's collectors.
func registerRuntime(reg *prometheus.Registry) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("asyrevel_"+name, help, labels, nil)
}

// The run's metrics. docs/running.md lists them; keep it in step.
var (
	dInfo  = desc("run_info", "The run this process takes part in (value 1).", "run", "role", "algo", "dataset", "model")
	dPhase = desc("phase", "The aggregator's phase: 1 for the current one (joining, training, stopping, done).", "phase")

	dTrainingSeconds = desc("training_seconds", "Training time so far (after a resume: with the time before it).")
	dSteps           = desc("steps_total", "Requests the aggregator answered: training steps of all parties.")
	dAnswered        = desc("party_answered_total", "Requests of the party the aggregator answered.", "party")
	dLag             = desc("party_last_request_age_seconds", "Seconds since the aggregator received the party's latest valid request (its lag).", "party")
	dDeparted        = desc("party_departed", "1 while an evaluation stopped waiting for the party and it has not come back.", "party")
	dStaleLast       = desc("party_staleness_last", "Staleness of the party's latest reply: how many updates the other parties' slots it used were behind.", "party")
	dStaleMax        = desc("party_staleness_max", "Largest staleness of the party's replies.", "party")
	dStaleMean       = desc("party_staleness_mean", "Mean staleness of the party's replies.", "party")
	dStaleEvals      = desc("party_stale_evaluations_total", "Evaluations scored with the party's last outputs because it did not answer in time.", "party")
	dRunStaleMax     = desc("staleness_max", "Largest staleness of any reply of the run.")
	dRunStaleMean    = desc("staleness_mean", "Mean staleness of the replies of the run.")
	dDepartures      = desc("party_departures_total", "Times an evaluation stopped waiting for a silent party (--party-timeout).")
	dReturns         = desc("party_returns_total", "Times a departed party came back.")

	dPartySteps    = desc("party_steps_total", "Updates the party applied to its model (its own count).", "party")
	dPartyRequests = desc("party_requests_total", "Requests (outputs c and c_hat) the party published.", "party")
	dPartyReplies  = desc("party_replies_total", "Replies the party accepted.", "party")
	dInFlight      = desc("party_requests_in_flight", "The party's requests waiting for their reply.", "party")
	dWindow        = desc("party_window", "Requests the party may keep in flight (--window): in flight / window is the window's occupancy.", "party")
	dReceipts      = desc("party_receipts_total", "Checkpoints of the log the party checked and countersigned.", "party")

	dTrainLoss   = desc("train_loss", "Training loss of the latest evaluation (the head's mean loss, without the regulariser).")
	dHeldLoss    = desc("heldout_loss", "Held-out loss of the latest evaluation (the test set, or the --holdout rows).")
	dHeldAcc     = desc("heldout_accuracy_ratio", "Held-out accuracy of the latest evaluation, 0 to 1.")
	dEvalSteps   = desc("evaluation_steps", "Steps answered when the latest evaluation was requested.")
	dEvaluations = desc("evaluations_total", "Evaluation rounds scored (the curve's points).")
	dEvalDur     = desc("evaluation_duration_seconds", "Duration of the evaluation rounds, request to score (rounds that went on without a departed party and the final round excluded).")
	dEvalLast    = desc("evaluation_last_duration_seconds", "Duration of the latest measured evaluation round.")

	dRhoMax     = desc("privacy_label_rho_max", "Privacy loss (zCDP rho) of the worst label in one party's view.")
	dRhoMedian  = desc("privacy_label_rho_median", "Median privacy loss (zCDP rho) over the labels visited, in the worst party's view.")
	dRhoBudget  = desc("privacy_label_rho_budget", "The budget: the most privacy loss (zCDP rho) any label may spend (--budget).")
	dEpsMax     = desc("privacy_label_epsilon_max", "Epsilon of the worst label at the run's delta, one party's view.")
	dEpsMedian  = desc("privacy_label_epsilon_median", "Median epsilon over the labels visited at the run's delta, one party's view.")
	dAUCBound   = desc("privacy_auc_bound", "Largest label-inference AUC a single party can reach against the worst label so far.")
	dMasked     = desc("privacy_masked_visits_total", "Sample visits the budget refused.")
	dLabelsSeen = desc("privacy_labels_visited", "Training labels visited at least once.")

	dStreamBytes = desc("stream_bytes", "Bytes the run's stream holds.")
	dStreamLimit = desc("stream_limit_bytes", "The run's stream's bound (--max-store; absent when unbounded).")
	dStreamMsgs  = desc("stream_messages", "Messages the run's stream holds.")

	dRejected = desc("rejected_total", "Deliveries rejected, by receiver and reason.", "receiver", "reason")
	dResumes  = desc("resumes_total", "Times this process resumed from its checkpoint and the stream: --resume at its start, or by itself after its broker connection was lost.")
	dOutage   = desc("broker_outage_seconds_total", "Seconds the broker was unreachable for this process: no connection, or the run's stream answering none of its publishes.")
	dReach    = desc("broker_reachable", "1 while every broker connection of this process is up.")
	dTrust    = desc("trust_enabled", "1 when the trust layer is on (messages signed and verified).")
	dSeals    = desc("seals_total", "Signed checkpoints of the log the aggregator published.")

	dBusMsgs    = desc("bus_messages_total", "Messages through a broker connection of the process (payloads), by direction.", "conn", "direction")
	dBusBytes   = desc("bus_payload_bytes_total", "Payload bytes through a broker connection of the process, by direction.", "conn", "direction")
	dBusWire    = desc("bus_wire_bytes_total", "Bytes on the wire of a broker connection, protocol included, by direction.", "conn", "direction")
	dBusDropped = desc("bus_dropped_total", "Live deliveries lost because a subscription fell behind.", "conn")
	dBusReconn  = desc("bus_reconnects_total", "Times a broker connection was restored after a loss.", "conn")
)

var allDescs = []*prometheus.Desc{dInfo, dPhase, dTrainingSeconds, dSteps, dAnswered, dLag, dDeparted, dStaleLast, dStaleMax,
	dStaleMean, dStaleEvals, dRunStaleMax, dRunStaleMean, dDepartures, dReturns, dPartySteps, dPartyRequests, dPartyReplies,
	dInFlight, dWindow, dReceipts, dTrainLoss, dHeldLoss, dHeldAcc, dEvalSteps, dEvaluations, dEvalDur, dEvalLast, dRhoMax,
	dRhoMedian, dRhoBudget, dEpsMax, dEpsMedian, dAUCBound, dMasked, dLabelsSeen, dStreamBytes, dStreamLimit, dStreamMsgs,
	dRejected, dResumes, dOutage, dReach, dTrust, dSeals, dBusMsgs, dBusBytes, dBusWire, dBusDropped, dBusReconn}

// collector is a Watch's Prometheus collector: it reads the runtimes at
// scrape time.
type collector struct{ w *Watch }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

var phases = []string{"joining", "training", "stopping", "done"}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	w := c.w
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v := w.read(ctx)
	gauge := func(d *prometheus.Desc, val float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, val, labels...)
	}
	counter := func(d *prometheus.Desc, val float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, val, labels...)
	}
	i := v.info
	gauge(dInfo, 1, i.Run, i.Role, i.Algo, i.Dataset, i.Model)

	resumes := v.resumes
	if i.Resumed {
		resumes++
	}
	outage := v.outage
	reachable := true
	trust := false
	for _, b := range v.buses {
		outage += b.outage
		reachable = reachable && !b.unreachable
		counter(dBusMsgs, float64(b.MsgsIn), b.name, "in")
		counter(dBusMsgs, float64(b.MsgsOut), b.name, "out")
		counter(dBusBytes, float64(b.BytesIn), b.name, "in")
		counter(dBusBytes, float64(b.BytesOut), b.name, "out")
		counter(dBusWire, float64(b.WireIn), b.name, "in")
		counter(dBusWire, float64(b.WireOut), b.name, "out")
		counter(dBusDropped, float64(b.Dropped), b.name)
		counter(dBusReconn, float64(b.Reconnects), b.name)
	}

	if s := v.agg; s != nil {
		for _, p := range phases {
			gauge(dPhase, b2f(p == s.Phase), p)
		}
		gauge(dTrainingSeconds, s.Elapsed.Seconds())
		counter(dSteps, float64(s.Steps))
		now := time.Now()
		for m, p := range s.Parties {
			id := strconv.Itoa(m + 1)
			counter(dAnswered, float64(p.Answered), id)
			if !p.LastRequest.IsZero() {
				gauge(dLag, now.Sub(p.LastRequest).Seconds(), id)
			}
			gauge(dDeparted, b2f(p.Departed), id)
			gauge(dStaleLast, float64(p.LastStale), id)
			gauge(dStaleMax, float64(p.MaxStale), id)
			gauge(dStaleMean, p.MeanStale, id)
			counter(dStaleEvals, float64(p.StaleEvals), id)
		}
		gauge(dRunStaleMax, float64(s.MaxStaleness))
		gauge(dRunStaleMean, s.MeanStaleness)
		counter(dDepartures, float64(s.Timeouts))
		counter(dReturns, float64(s.Returned))
		ch <- prometheus.MustNewConstSummary(dEvalDur, uint64(s.Evaluations), s.EvalSeconds, nil)
		gauge(dEvalLast, s.LastEval.Seconds())
		for r, n := range s.Rejected {
			counter(dRejected, float64(n), "aggregator", r)
		}
		trust = s.Trust
		counter(dSeals, float64(s.Seals))
		if d := s.Defense; d != nil {
			if d.Budget > 0 {
				gauge(dRhoBudget, d.Budget)
			}
			counter(dMasked, float64(d.Masked))
			if acc := d.Accounting; acc != nil {
				gauge(dRhoMax, acc.MaxRho)
				gauge(dRhoMedian, acc.MedianRho)
				gauge(dEpsMax, acc.Epsilon)
				gauge(dEpsMedian, acc.MedianEps)
				gauge(dAUCBound, acc.AUCBound)
				gauge(dLabelsSeen, float64(acc.Visited))
			}
		}
	}
	if v.evaluate {
		counter(dEvaluations, float64(v.nPoints))
		if pt := v.last; pt != nil {
			gauge(dTrainLoss, pt.TrainLoss)
			gauge(dHeldLoss, pt.TestLoss)
			gauge(dHeldAcc, pt.TestAccuracy)
			gauge(dEvalSteps, float64(pt.Steps))
		}
	}
	for m, st := range v.parties {
		if st == nil {
			continue
		}
		id := strconv.Itoa(m + 1)
		counter(dPartySteps, float64(st.Steps), id)
		counter(dPartyRequests, float64(st.Requests), id)
		counter(dPartyReplies, float64(st.Replies), id)
		gauge(dInFlight, float64(st.InFlight), id)
		if i.Window > 0 {
			gauge(dWindow, float64(i.Window), id)
		}
		counter(dReceipts, float64(st.Receipts), id)
		for r, n := range st.Rejected {
			counter(dRejected, float64(n), "party-"+id, r)
		}
	}
	if f := v.stream; f != nil {
		gauge(dStreamBytes, float64(f.Bytes))
		gauge(dStreamMsgs, float64(f.Messages))
		if f.Limit > 0 {
			gauge(dStreamLimit, float64(f.Limit))
		}
	}
	counter(dResumes, float64(resumes))
	counter(dOutage, outage.Seconds())
	if len(v.buses) > 0 {
		gauge(dReach, b2f(reachable))
	}
	if v.agg != nil {
		gauge(dTrust, b2f(trust))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
