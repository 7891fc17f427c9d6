// Package observe is what an operator sees of a running process: its
// Prometheus metrics and the state behind the live board (package board).
//
// A Watch is handed the runtimes a process runs (the aggregator, parties,
// broker connections, an embedded broker) as they are made, and reads
// their own counters only when asked: a scrape of /metrics, or the
// board's sampler once a second. Nothing is added to a training step:
// the aggregator and the parties keep the counters they keep anyway
// (aggregator.Snapshot, party.Stats, broker.Stats), and a scrape takes
// each runtime's lock once to copy them. The privacy accounting, which
// sorts one value per label, is computed at most once every
// PrivacyEvery, whatever the number of scrapers.
//
// Each Watch has its own registry (no global default registry): the
// run's collector, the Go runtime's and the process's. A broker process
// has a BrokerCollector that reads nats-server's own monitoring figures
// (varz, jsz) in-process at scrape time, and ServeBroker serves them with
// the server's JSON monitoring endpoints on the same address.
//
// Metric names follow Prometheus conventions: the asyrevel_ prefix,
// _total for counters, base units in the name (_seconds, _bytes,
// _ratio). docs/running.md lists them.
package observe
