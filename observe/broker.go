package observe

import (
	"net/http"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyrevel/asyrevel/broker"
)

// The broker's metrics: nats-server's own monitoring figures (varz and
// jsz), read in-process at scrape time, one series per server (a
// cluster's nodes in one process each have theirs).
var (
	bConns     = bdesc("connections", "Client connections open.")
	bConnTotal = bdesc("connections_total", "Client connections ever accepted.")
	bSubs      = bdesc("subscriptions", "Subscriptions open.")
	bRoutes    = bdesc("routes", "Routes to other nodes of the cluster open.")
	bMsgs      = bdesc("messages_total", "Messages the server received (in) and sent (out): clients and routes.", "direction")
	bBytes     = bdesc("bytes_total", "Payload bytes the server received (in) and sent (out).", "direction")
	bSlow      = bdesc("slow_consumers_total", "Clients disconnected for being slow consumers.")
	bMem       = bdesc("resident_memory_bytes", "The server's resident memory.")
	bJSStreams = bdesc("jetstream_streams", "JetStream streams.")
	bJSCons    = bdesc("jetstream_consumers", "JetStream consumers.")
	bJSMsgs    = bdesc("jetstream_messages", "Messages in all streams.")
	bJSBytes   = bdesc("jetstream_bytes", "Bytes in all streams.")
	bJSStore   = bdesc("jetstream_storage_bytes", "File storage JetStream uses.")
	bJSReserve = bdesc("jetstream_reserved_storage_bytes", "File storage the streams' bounds reserve.")
	bJSMax     = bdesc("jetstream_storage_limit_bytes", "The server's file storage limit.")
	bJSAPI     = bdesc("jetstream_api_requests_total", "JetStream API requests served.")
	bJSAPIErr  = bdesc("jetstream_api_errors_total", "JetStream API requests that failed.")
	bJSLeader  = bdesc("jetstream_meta_leader", "1 when the cluster's JetStream meta group has a leader (a single server: 1).")
	bStrMsgs   = bdesc("stream_messages", "Messages in a stream.", "stream")
	bStrBytes  = bdesc("stream_bytes", "Bytes in a stream.", "stream")
	bStrCons   = bdesc("stream_consumers", "Consumers of a stream.", "stream")
	bStrLast   = bdesc("stream_last_sequence", "Last sequence number of a stream.", "stream")
)

func bdesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("asyrevel_broker_"+name, help, append([]string{"server"}, labels...), nil)
}

var brokerDescs = []*prometheus.Desc{bConns, bConnTotal, bSubs, bRoutes, bMsgs, bBytes, bSlow, bMem, bJSStreams, bJSCons,
	bJSMsgs, bJSBytes, bJSStore, bJSReserve, bJSMax, bJSAPI, bJSAPIErr, bJSLeader, bStrMsgs, bStrBytes, bStrCons, bStrLast}

// BrokerCollector exports nats-server's monitoring figures of servers
// running in this process (asyrevel broker, or train's embedded broker).
type BrokerCollector struct {
	servers []*broker.Server
}

// NewBrokerCollector is the collector of servers.
func NewBrokerCollector(servers ...*broker.Server) *BrokerCollector {
	return &BrokerCollector{servers: servers}
}

// Describe sends the broker metrics' descriptions.
func (c *BrokerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range brokerDescs {
		ch <- d
	}
}

// Collect reads varz and jsz of each server.
func (c *BrokerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, srv := range c.servers {
		collectServer(ch, srv.NATS())
	}
}

func collectServer(ch chan<- prometheus.Metric, ns *server.Server) {
	if ns == nil || !ns.Running() {
		return
	}
	name := ns.Name()
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{name}, l...)...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append([]string{name}, l...)...)
	}
	if v, err := ns.Varz(nil); err == nil {
		gauge(bConns, float64(v.Connections))
		counter(bConnTotal, float64(v.TotalConnections))
		gauge(bSubs, float64(v.Subscriptions))
		gauge(bRoutes, float64(v.Routes))
		counter(bMsgs, float64(v.InMsgs), "in")
		counter(bMsgs, float64(v.OutMsgs), "out")
		counter(bBytes, float64(v.InBytes), "in")
		counter(bBytes, float64(v.OutBytes), "out")
		counter(bSlow, float64(v.SlowConsumers))
		gauge(bMem, float64(v.Mem))
		if js := v.JetStream.Config; js != nil {
			gauge(bJSMax, float64(js.MaxStore))
		}
	}
	js, err := ns.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
	if err != nil || js.Disabled {
		return
	}
	gauge(bJSStreams, float64(js.Streams))
	gauge(bJSCons, float64(js.Consumers))
	gauge(bJSMsgs, float64(js.Messages))
	gauge(bJSBytes, float64(js.Bytes))
	gauge(bJSStore, float64(js.Store))
	gauge(bJSReserve, float64(js.ReservedStore))
	counter(bJSAPI, float64(js.API.Total))
	counter(bJSAPIErr, float64(js.API.Errors))
	leader := 1.0
	if js.Meta != nil && js.Meta.Leader == "" {
		leader = 0
	}
	gauge(bJSLeader, leader)
	seen := map[string]bool{}
	for _, acc := range js.AccountDetails {
		for _, st := range acc.Streams {
			if seen[st.Name] {
				continue
			}
			seen[st.Name] = true
			gauge(bStrMsgs, float64(st.State.Msgs), st.Name)
			gauge(bStrBytes, float64(st.State.Bytes), st.Name)
			gauge(bStrCons, float64(st.State.Consumers), st.Name)
			gauge(bStrLast, float64(st.State.LastSeq), st.Name)
		}
	}
}

// BrokerHandler serves a broker process's metrics: /metrics (reg, with
// BrokerCollector's figures) and nats-server's own JSON monitoring
// endpoints of srv (/varz, /jsz, /connz, /routez, /accountz, /healthz),
// which its monitoring port would give, so that a NATS dashboard or
// exporter can read them from the same address.
func BrokerHandler(reg *prometheus.Registry, srv *broker.Server) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", MetricsHandler(reg))
	ns := srv.NATS()
	mux.HandleFunc("/varz", ns.HandleVarz)
	mux.HandleFunc("/jsz", ns.HandleJsz)
	mux.HandleFunc("/connz", ns.HandleConnz)
	mux.HandleFunc("/routez", ns.HandleRoutez)
	mux.HandleFunc("/accountz", ns.HandleAccountz)
	mux.HandleFunc("/healthz", ns.HandleHealthz)
	return mux
}
