package observe

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/party"
	"github.com/prometheus/client_golang/prometheus"
)

// Info describes the run a process takes part in, for the board's title
// and asyrevel_run_info.
type Info struct {
	Run     string `json:"run"`
	Role    string `json:"role"` // train, aggregator or party-M
	Algo    string `json:"algo"`
	Dataset string `json:"dataset"`
	Model   string `json:"model"`
	Parties int    `json:"party_count"`
	Window  int    `json:"window"`                   // requests in flight per party
	Privacy string `json:"privacy_switch,omitempty"` // what the --privacy switch chose ("" or "off": none)
	Resumed bool   `json:"resumed,omitempty"`        // the process started with --resume
}

// How often the costlier figures are read again, whatever the number of
// scrapes and page views.
const (
	// PrivacyEvery: the privacy accounting (a sort of one value per label).
	PrivacyEvery = 5 * time.Second
	// StreamEvery: the stream's size and message count (a JetStream API
	// request to the broker).
	StreamEvery = 5 * time.Second
	// SampleEvery is the board's sampling period (Sample).
	SampleEvery = time.Second
)

// maxEvents bounds the events a Watch keeps (the oldest are dropped).
const maxEvents = 500

// Watch gathers what one process of a run shows. Its Set methods hand it
// the runtimes as the process makes them (again after a resume); they
// and every other method are safe for concurrent use, and a nil *Watch
// ignores them all, so that a process without metrics or board calls them
// all the same.
type Watch struct {
	info  Info
	start time.Time
	reg   *prometheus.Registry

	mu      sync.Mutex
	agg     *aggregator.Aggregator
	parties []*party.Party // by party id - 1; nil where not in this process
	buses   []namedBus
	stream  StreamSource
	servers []*broker.Server
	heal    func() (int, time.Duration)
	curve   []aggregator.Point
	events  []Event
	dropped int // events dropped (maxEvents)

	// The previous sample, for the events.
	prev        *aggregator.Snapshot
	prevHeal    int
	prevRejects map[string]int64

	privAt    time.Time
	priv      *aggregator.DefenseReport
	streamAt  time.Time
	streamFig *StreamFigures
}

type namedBus struct {
	name string
	bus  broker.Bus
}

// StreamSource reads the run's stream: its size and bound (broker.JetStream).
type StreamSource interface {
	Room(ctx context.Context) (used, limit int64, err error)
	Count(ctx context.Context, filter string) (uint64, error)
}

// StreamFigures are the run's stream's size, bound (-1: none) and messages.
type StreamFigures struct {
	Bytes    int64  `json:"bytes"`
	Limit    int64  `json:"limit"`
	Messages uint64 `json:"messages"`
}

// New makes the Watch of a process and its registry: the run's collector,
// the Go runtime's and the process's.
func New(info Info) *Watch {
	w := &Watch{info: info, start: time.Now(), reg: prometheus.NewRegistry()}
	w.reg.MustRegister(&collector{w: w})
	registerRuntime(w.reg)
	return w
}

// Registry is the Watch's registry: add a process's own collectors to it.
func (w *Watch) Registry() *prometheus.Registry {
	if w == nil {
		return nil
	}
	return w.reg
}

// Describe completes the run's description once its data are loaded:
// the data set's name and what the --privacy switch chose.
func (w *Watch) Describe(dataset, privacy string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.info.Dataset, w.info.Privacy = dataset, privacy
	w.mu.Unlock()
}

// Ran reports whether the Watch was handed an aggregator.
func (w *Watch) Ran() bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.agg != nil
}

// SetAggregator hands the Watch the process's aggregator (again after a
// resume).
func (w *Watch) SetAggregator(a *aggregator.Aggregator) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.agg = a
	w.mu.Unlock()
}

// SetParty hands the Watch party m (1..q) of this process.
func (w *Watch) SetParty(m int, p *party.Party) {
	if w == nil || m < 1 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.parties) < m {
		w.parties = append(w.parties, nil)
	}
	w.parties[m-1] = p
}

// SetBus hands the Watch a broker connection of the process under name
// (aggregator, party-M), replacing an earlier one of that name.
func (w *Watch) SetBus(name string, b broker.Bus) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.buses {
		if w.buses[i].name == name {
			w.buses[i].bus = b
			return
		}
	}
	w.buses = append(w.buses, namedBus{name, b})
}

// SetStream hands the Watch what reads the run's stream (the
// aggregator's connection).
func (w *Watch) SetStream(s StreamSource) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.stream, w.streamAt = s, time.Time{}
	w.mu.Unlock()
}

// SetServers hands the Watch the embedded broker's servers (one, or a
// cluster's nodes): their figures are exported as BrokerCollector's.
func (w *Watch) SetServers(servers ...*broker.Server) {
	if w == nil || len(servers) == 0 {
		return
	}
	w.mu.Lock()
	first := w.servers == nil
	w.servers = servers
	w.mu.Unlock()
	if first {
		w.reg.MustRegister(serversCollector{w})
	}
}

// serversCollector exports the figures of the Watch's current servers.
type serversCollector struct{ w *Watch }

func (c serversCollector) Describe(ch chan<- *prometheus.Desc) { (&BrokerCollector{}).Describe(ch) }

func (c serversCollector) Collect(ch chan<- prometheus.Metric) {
	c.w.mu.Lock()
	servers := c.w.servers
	c.w.mu.Unlock()
	NewBrokerCollector(servers...).Collect(ch)
}

// SetHeal hands the Watch the count of the process's resumes after a lost
// broker connection and the outage they waited out.
func (w *Watch) SetHeal(f func() (int, time.Duration)) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.heal = f
	w.mu.Unlock()
}

// Point records an evaluation (the aggregator's OnPoint).
func (w *Watch) Point(pt aggregator.Point) {
	if w == nil {
		return
	}
	pt.Stale = slices.Clone(pt.Stale)
	w.mu.Lock()
	w.curve = append(w.curve, pt)
	w.mu.Unlock()
}

// OnPoint wraps next (which may be nil) so that each point reaches the
// Watch too.
func (w *Watch) OnPoint(next func(aggregator.Point)) func(aggregator.Point) {
	if w == nil {
		return next
	}
	return func(pt aggregator.Point) {
		w.Point(pt)
		if next != nil {
			next(pt)
		}
	}
}

// Event is something that happened to the run, as the board lists it.
type Event struct {
	Seconds float64   `json:"seconds"` // since the Watch started
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"`            // phase, departed, returned, refused, broker, resumed, rejected
	Party   int       `json:"party,omitempty"` // the party it is about (0: none)
	Text    string    `json:"text"`
}

// Event records an event.
func (w *Watch) Event(kind string, m int, format string, a ...any) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.event(kind, m, fmt.Sprintf(format, a...))
	w.mu.Unlock()
}

func (w *Watch) event(kind string, m int, text string) {
	now := time.Now()
	w.events = append(w.events, Event{Seconds: now.Sub(w.start).Seconds(), At: now, Kind: kind, Party: m, Text: text})
	if len(w.events) > maxEvents {
		n := len(w.events) - maxEvents
		w.events = slices.Delete(w.events, 0, n)
		w.dropped += n
	}
}

// Run samples the runtimes every SampleEvery until ctx is done, turning
// what changed into events (Sample).
func (w *Watch) Run(ctx context.Context) {
	if w == nil {
		return
	}
	t := time.NewTicker(SampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.Sample()
		}
	}
}

// Sample compares the aggregator's state with the previous sample's and
// records what changed as events: the phase, parties that departed,
// came back or were refused, the broker's outages, resumes, rejections.
func (w *Watch) Sample() {
	if w == nil {
		return
	}
	w.mu.Lock()
	a, heal := w.agg, w.heal
	w.mu.Unlock()
	var cur *aggregator.Snapshot
	if a != nil {
		s := a.Snapshot(aggregator.SnapshotOptions{})
		cur = &s
	}
	nHeal := 0
	var out time.Duration
	if heal != nil {
		nHeal, out = heal()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if nHeal > w.prevHeal {
		w.event("resumed", 0, fmt.Sprintf("resumed by itself from its checkpoint and the stream after the broker connection was lost (%s so far, %.1f s of outage)", times(nHeal), out.Seconds()))
	}
	w.prevHeal = nHeal
	if cur == nil {
		return
	}
	w.diff(w.prev, cur)
	w.prev = cur
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// diff records the events between two aggregator samples (w.mu held).
func (w *Watch) diff(p, c *aggregator.Snapshot) {
	if p == nil {
		p = &aggregator.Snapshot{Phase: "joining", Parties: make([]aggregator.PartySnapshot, len(c.Parties))}
		if c.Resumed {
			what := "resumed from its checkpoint and the run's stream"
			if r := c.Recovery; r != nil {
				what += fmt.Sprintf(" (%d requests applied again from the stream)", r.Reapplied)
			}
			w.event("resumed", 0, what)
		}
	}
	if c.Phase != p.Phase {
		switch c.Phase {
		case "training":
			w.event("phase", 0, fmt.Sprintf("training started (%d parties joined)", len(c.Parties)))
		case "stopping":
			w.event("phase", 0, "training stopped: "+orString(c.StopReason, "stop")+"; final evaluation")
		case "done":
			w.event("phase", 0, "run ended: "+orString(c.StopReason, "done"))
		}
	}
	for i := range c.Parties {
		if i >= len(p.Parties) {
			break
		}
		cp, pp := &c.Parties[i], &p.Parties[i]
		switch {
		case cp.Departed && !pp.Departed:
			w.event("departed", i+1, fmt.Sprintf("party %d departed: %s; training goes on without it", i+1, orString(cp.Why, "silent")))
		case !cp.Departed && pp.Departed:
			w.event("returned", i+1, fmt.Sprintf("party %d is back", i+1))
		}
		if cp.Refused != "" && cp.Refused != pp.Refused {
			w.event("refused", i+1, fmt.Sprintf("party %d refused: %s", i+1, cp.Refused))
		}
	}
	switch {
	case !c.Unreachable.IsZero() && p.Unreachable.IsZero():
		w.event("broker", 0, "the broker is unreachable: training waits for it")
	case c.Unreachable.IsZero() && !p.Unreachable.IsZero():
		w.event("broker", 0, fmt.Sprintf("the broker is back after %.1f s", time.Since(p.Unreachable).Seconds()))
	}
	if w.prevRejects == nil {
		w.prevRejects = map[string]int64{}
	}
	var reasons []string
	for r, n := range c.Rejected {
		if n > w.prevRejects[r] {
			reasons = append(reasons, fmt.Sprintf("%d %s", n-w.prevRejects[r], r))
		}
	}
	if len(reasons) > 0 {
		sort.Strings(reasons)
		w.event("rejected", 0, "messages rejected: "+strings.Join(reasons, ", "))
	}
	w.prevRejects = maps.Clone(c.Rejected)
}

func orString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// view is one reading of every runtime of the process.
type view struct {
	info     Info
	agg      *aggregator.Snapshot
	parties  []*party.Stats // by party id - 1; nil where not in this process
	buses    []namedStats
	stream   *StreamFigures
	resumes  int
	outage   time.Duration // waited out by the heal's resumes
	last     *aggregator.Point
	nPoints  int
	evaluate bool // an aggregator runs here
}

type namedStats struct {
	name string
	broker.Stats
	unreachable bool
	outage      time.Duration
}

// read takes one view of the runtimes: each one's lock once.
func (w *Watch) read(ctx context.Context) view {
	w.mu.Lock()
	a, heal, stream := w.agg, w.heal, w.stream
	parties := slices.Clone(w.parties)
	buses := slices.Clone(w.buses)
	privDue := time.Since(w.privAt) >= PrivacyEvery
	streamDue := stream != nil && time.Since(w.streamAt) >= StreamEvery
	if privDue {
		w.privAt = time.Now()
	}
	if streamDue {
		w.streamAt = time.Now()
	}
	v := view{info: w.info}
	if n := len(w.curve); n > 0 {
		pt := w.curve[n-1]
		v.last, v.nPoints = &pt, n
	}
	w.mu.Unlock()

	if a != nil {
		s := a.Snapshot(aggregator.SnapshotOptions{Privacy: privDue})
		v.agg, v.evaluate = &s, true
	}
	v.parties = make([]*party.Stats, len(parties))
	for i, p := range parties {
		if p != nil {
			st := p.Stats()
			v.parties[i] = &st
		}
	}
	for _, b := range buses {
		st, _ := broker.BusStats(b.bus)
		ns := namedStats{name: b.name, Stats: st}
		if u, ok := b.bus.(interface{ Unreachable() time.Time }); ok {
			ns.unreachable = !u.Unreachable().IsZero()
		}
		if o, ok := b.bus.(interface{ Outage() time.Duration }); ok {
			ns.outage = o.Outage()
		}
		v.buses = append(v.buses, ns)
	}
	if heal != nil {
		v.resumes, v.outage = heal()
	}
	var fig *StreamFigures
	if streamDue {
		fig = readStream(ctx, stream, v.info.Run)
	}

	w.mu.Lock()
	if v.agg != nil {
		if v.agg.Defense != nil {
			w.priv = v.agg.Defense
		} else {
			v.agg.Defense = w.priv
		}
	}
	if streamDue && fig != nil {
		w.streamFig = fig
	}
	v.stream = w.streamFig
	w.mu.Unlock()
	return v
}

// readStream reads the stream's figures (nil if the broker does not answer
// within a second).
func readStream(ctx context.Context, s StreamSource, run string) *StreamFigures {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	used, limit, err := s.Room(ctx)
	if err != nil {
		return nil
	}
	n, err := s.Count(ctx, "asyrevel."+run+".>")
	if err != nil {
		return nil
	}
	return &StreamFigures{Bytes: used, Limit: limit, Messages: n}
}

// Num is a float64 that JSON writes as null when it is not finite (a run
// without a test set has no accuracy).
type Num float64

// MarshalJSON writes n, or null.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}
