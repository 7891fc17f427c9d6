package run

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// ErrInterrupted is returned, with the summary of the part that ran, by a
// run whose context was cancelled (Ctrl-C, SIGTERM).
var ErrInterrupted = errors.New("run interrupted")

// begin is how every process of a run starts: the configuration checked
// (train: a run that trains in this process), the watch started for the
// process who (train, aggregator, party-M), the data of role loaded and the
// privacy profile applied. The caller closes the watcher.
func begin(c Config, hooks Hooks, train bool, who string, role int) (*job, *watcher, *Data, error) {
	cfg := &job{Config: c, hooks: hooks}
	if err := cfg.prepare(); err != nil {
		return nil, nil, nil, err
	}
	if err := checkResumeTrust(cfg, train); err != nil {
		return nil, nil, nil, err
	}
	wt, err := startWatch(cfg, who)
	if err != nil {
		return nil, nil, nil, err
	}
	cfg.watch = wt.watch()
	data, err := loadData(cfg, role)
	if err == nil {
		err = cfg.applyPrivacy(data.Classes, data.NTrain)
	}
	if err != nil {
		wt.close()
		return nil, nil, nil, err
	}
	return cfg, wt, data, nil
}

// Train runs one AsyREVEL training in this process: it loads and splits the
// data, starts the broker (an embedded JetStream server unless c.NATS
// names one), the aggregator and the parties, each with a connection of its
// own, runs until the configured end, and writes the outputs.
//
// If ctx is cancelled (Ctrl-C), Train still writes the outputs of the part
// that ran and returns its summary with an error wrapping ErrInterrupted.
// hooks are what the caller plugs in (the zero value: none).
func Train(ctx context.Context, c Config, hooks Hooks) (*Summary, error) {
	t0 := time.Now()
	cfg, wt, data, err := begin(c, hooks, true, "train", RoleAll)
	if err != nil {
		return nil, err
	}
	defer wt.close()
	wt.loaded(data)
	logData(cfg, data)
	if cfg.hooks.Attackers != nil {
		if err := cfg.hooks.Attackers(&cfg.Config, data, &cfg.hooks); err != nil {
			return nil, err
		}
	}
	q := cfg.Parties
	if !cfg.Resume && cfg.Out != "" {
		// OUT describes one run: an earlier run there is kept aside (or
		// removed with ReplaceOut) before this one writes a file.
		if err := keepEarlier(cfg); err != nil {
			return nil, err
		}
	}
	if cfg.trust, err = makeRunKeys(cfg); err != nil {
		return nil, err
	}
	defer cfg.trust.close()
	obs := newObserver(cfg)
	cfg.hooks.OnPoint = cfg.watch.OnPoint(obs.onPoint(cfg.hooks.OnPoint))
	prog := newProgress(cfg, data)
	agg, err := newAggregator(cfg, data, prog.point)
	if err != nil {
		return nil, err
	}
	cfg.watch.SetAggregator(agg)
	parties := make([]*party.Party, q)
	cks := make([]*party.Checkpoint, q)
	for m := range parties {
		p, close, err := newParty(ctx, cfg, data, m+1, 0, nil, &cks[m])
		if err != nil {
			return nil, err
		}
		defer close()
		parties[m] = p
		cfg.watch.SetParty(m+1, p)
	}

	net, err := openNetwork(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer net.close()
	wt.network(net)
	ctx, unwatch := net.WatchStore(ctx)
	defer unwatch()
	if f := cfg.hooks.OnBroker; f != nil && net.URL() != "" {
		f(net.URL())
	}
	aggBus, err := net.connect(ctx, "aggregator")
	if err != nil {
		return nil, err
	}
	wt.aggregatorBus(aggBus)
	if cfg.Resume {
		err = net.checkResume(ctx, aggBus, cfg.Run)
		for m := 0; m < q && err == nil; m++ {
			err = resumeParty(ctx, aggBus, cfg, parties[m], cks[m], m+1)
		}
	} else {
		err = net.checkFresh(ctx, aggBus, cfg.Run)
	}
	if err != nil {
		aggBus.Close()
		return nil, err
	}
	partyBus := make([]broker.Bus, q)
	for m := range partyBus {
		if partyBus[m], err = net.connect(ctx, fmt.Sprintf("party-%d", m+1)); err != nil {
			return nil, err
		}
		cfg.watch.SetBus(fmt.Sprintf("party-%d", m+1), partyBus[m])
	}
	obs.start(parties)
	defer obs.stop()
	// The whole data set was garbage once split by columns: collect it now,
	// so that the heap's next limit is set by what the run keeps (a
	// million dense samples: 3.3 GB peak resident without this).
	runtime.GC()
	setup := time.Since(t0)
	g, gctx := errgroup.WithContext(ctx)
	var res *aggregator.Result
	var paused error // the aggregator paused (Hooks.Pause)
	var halted error // it took a pause as an interruption (pausedAsStop)
	// The parties start once the aggregator listens to what they send
	// first: a design without history (core) would lose it otherwise,
	// and the others need not replay it.
	watch := newWatchBus(aggBus, cfg.Run)
	g.Go(func() error {
		var err error
		res, err = agg.Run(gctx, watch)
		if res != nil && res.Paused && ctx.Err() == nil {
			// The parties countersign the seal and end by themselves:
			// the group must not cancel them first.
			paused = err
			return nil
		}
		if ctx.Err() == nil && pausedAsStop(res, err) {
			// Before training, say: it told the parties to stop, and the
			// group stops them too. Returning nil would leave a party
			// started after the stop (a design without history never
			// sees it) waiting for a start that never comes.
			halted = err
		}
		return err
	})
	select {
	case <-watch.ready:
	case <-gctx.Done():
	}
	for m, p := range parties {
		g.Go(func() error { return p.Run(gctx, partyBus[m]) })
	}
	err = g.Wait()
	if errors.Is(err, party.ErrInterrupted) && res != nil && res.Final.Final && res.Interrupted == "" {
		// The run had ended when the signal came: a party that had not
		// seen the stop yet does not make it an interrupted run.
		err = nil
	}
	stalled := errors.Is(err, aggregator.ErrStalled) && res != nil
	diverged := errors.Is(err, party.ErrDiverged) && res != nil                                                        // stop.go: the outputs of the part that ran, no model
	stopped := err != nil && (ctx.Err() != nil || stalled || diverged) && res != nil || paused != nil || halted != nil // interrupted: the outputs of the part that ran
	if err != nil && !stopped {
		return nil, err
	}
	buses := append(partyBus, aggBus)
	for _, b := range buses {
		if err := b.Close(); err != nil && !stopped {
			return nil, fmt.Errorf("closing connection: %w", err)
		}
	}
	s := summarize(cfg, data, res, net.Name())
	s.WireBytes = broker.WireBytes(buses...)
	s.Dropped = broker.Dropped(buses...)
	s.WallSeconds = time.Since(t0).Seconds()
	s.SetupSeconds = setup.Seconds()
	s.MessagesSent = s.MessagesDown // the aggregator's
	for _, p := range parties {
		st := p.Stats()
		s.MessagesSent += st.MessagesUp
		for r, v := range st.Rejected {
			s.Rejected["party:"+r] += v
		}
		s.PartySteps = append(s.PartySteps, st.Steps)
		s.PartyRepliesFrom = append(s.PartyRepliesFrom, st.RepliesFrom)
		s.PartyEvalsFrom = append(s.PartyEvalsFrom, st.EvalsFrom)
		s.PartyEvalChunksLost += st.EvalChunksLost
		prog.flat(st)
	}
	if !slices.ContainsFunc(s.PartyRepliesFrom, func(v uint64) bool { return v > 0 }) {
		s.PartyRepliesFrom = nil
	}
	if !slices.ContainsFunc(s.PartyEvalsFrom, func(v uint64) bool { return v > 0 }) {
		s.PartyEvalsFrom = nil
	}
	if !stopped {
		if res.Fit != nil {
			cfg.EmbedHidden = res.Fit.Hidden // the head the label-free fit kept
		}
		f, err := aggregatorModel(cfg, data, res.Params, res.Steps)
		if err = writeModel(cfg, f, err); err != nil {
			return nil, err
		}
		for m, p := range parties {
			f, err := partyModel(cfg, data, m+1, p.Params())
			if err = writeModel(cfg, f, err); err != nil {
				return nil, err
			}
		}
	}
	if stalled {
		s, _ = net.finish(ctx, cfg, s, prog)
		return s, err
	}
	if paused != nil {
		s.StoppedBy = pauseName(cfg, s, paused)
		return net.finishPaused(ctx, cfg, s, prog, paused)
	}
	if halted != nil {
		s.StoppedBy = pauseName(cfg, s, halted)
		return net.finishPaused(ctx, cfg, s, prog, unsealed(halted))
	}
	if diverged {
		end := divergedEnd(s, err) // before finish writes summary.json
		return end(net.finish(ctx, cfg, s, prog))
	}
	if !stopped {
		// The run is over: its log is closed (seal.go), even if a signal
		// comes meanwhile (a further one quits at once).
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := net.sealStream(sctx)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	return stuckErr(cfg)(net.finish(ctx, cfg, s, prog))
}

// watchBus is the aggregator's Bus in Train: ready is closed once the
// aggregator has subscribed to the subjects a party publishes on.
type watchBus struct {
	broker.Bus
	mu     sync.Mutex
	need   []string
	ready  chan struct{}
	closed bool
}

// Unreachable, Outage and OutageSince pass on the broker connection's outage state
// (broker.JetStream), which the aggregator asks its bus for.
func (w *watchBus) Unreachable() time.Time {
	if u, ok := w.Bus.(interface{ Unreachable() time.Time }); ok {
		return u.Unreachable()
	}
	return time.Time{}
}

// Outage: see Unreachable.
func (w *watchBus) Outage() time.Duration {
	if o, ok := w.Bus.(interface{ Outage() time.Duration }); ok {
		return o.Outage()
	}
	return 0
}

// OutageSince: see Unreachable.
func (w *watchBus) OutageSince(t time.Time) time.Duration {
	if o, ok := w.Bus.(interface{ OutageSince(time.Time) time.Duration }); ok {
		return o.OutageSince(t)
	}
	return 0
}

// Room passes on the stream's fill (broker.JetStream), which the
// aggregator watches to pause before its bound.
func (w *watchBus) Room(ctx context.Context) (used, limit int64, err error) {
	if r, ok := w.Bus.(interface {
		Room(context.Context) (int64, int64, error)
	}); ok {
		return r.Room(ctx)
	}
	return 0, 0, broker.ErrUnsupported
}

func newWatchBus(b broker.Bus, run string) *watchBus {
	return &watchBus{Bus: b, ready: make(chan struct{}), need: []string{
		schemas.Subject(run, schemas.KindHello, 1), schemas.Subject(run, schemas.KindEval, 1), schemas.Subject(run, schemas.KindOutput, 1),
	}}
}

func (w *watchBus) Subscribe(ctx context.Context, filters []string, opts broker.SubscribeOptions, h broker.Handler) (broker.Subscription, error) {
	s, err := w.Bus.Subscribe(ctx, filters, opts, h)
	if err != nil {
		return s, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.need = slices.DeleteFunc(w.need, func(subj string) bool {
		return slices.ContainsFunc(filters, func(f string) bool { return broker.SubjectMatch(f, subj) })
	})
	if len(w.need) == 0 && !w.closed {
		close(w.ready)
		w.closed = true
	}
	return s, nil
}

// Aggregate runs only the aggregator of a run, connected to the broker at
// c.NATS, for a run whose parties are separate processes. Interrupted,
// it writes the outputs of the part that ran as Train does.
func Aggregate(ctx context.Context, c Config, hooks Hooks) (*Summary, error) {
	t0 := time.Now()
	cfg, wt, data, err := begin(c, hooks, false, "aggregator", RoleAggregator)
	if err != nil {
		return nil, err
	}
	defer wt.close()
	wt.loaded(data)
	logData(cfg, data)
	if cfg.trust, err = readKeys(cfg, 0); err != nil {
		return nil, err
	}
	warnUntrusted(cfg)
	cfg.hooks.OnPoint = cfg.watch.OnPoint(cfg.hooks.OnPoint)
	prog := newProgress(cfg, data)
	if cfg.healable(0) {
		cfg.heal = &healState{}
		cfg.watch.SetHeal(cfg.heal.resumes)
	}
	agg, err := newAggregator(cfg, data, prog.point)
	if err != nil {
		return nil, err
	}
	cfg.watch.SetAggregator(agg)
	net, err := openNetwork(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer net.close()
	wt.network(net)
	var (
		res    *aggregator.Result
		bus    broker.Bus
		lostAt time.Time
	)
	for {
		if bus, err = net.connect(ctx, "aggregator"); err != nil {
			if !lostAt.IsZero() {
				err = fmt.Errorf("resuming after the broker connection was lost: %w", err)
			}
			return nil, err
		}
		wt.aggregatorBus(bus)
		if !lostAt.IsZero() {
			cfg.heal.healed(time.Since(lostAt))
			cfg.hooks.Log.Info().Str("broker", cfg.NATS).Str("after", time.Since(lostAt).Round(time.Millisecond).String()).
				Msg("the broker is back: the aggregator resumes")
		}
		check := net.checkAggregator
		switch {
		case cfg.Resume && !lostAt.IsZero():
			// Resuming by itself: this process was running the run, which
			// had started and not ended. Reading the controls to tell a
			// user that typed --resume so cost a return 50 to 100 ms.
			check = nil
		case cfg.Resume:
			check = net.checkResume
		}
		if check != nil {
			if err := check(ctx, bus, cfg.Run); err != nil {
				bus.Close()
				return nil, err
			}
		}
		lctx, cancel := watchLoss(ctx, bus)
		res, err = agg.Run(lctx, bus)
		lost := lostConn(ctx, lctx, err)
		cancel(nil)
		if !lost {
			break
		}
		// The broker connection was lost: the aggregator stopped
		// publishing. It resumes from its latest checkpoint and the
		// stream as soon as the broker is back, as --resume would.
		bus.Close()
		lostAt = time.Now()
		cfg.heal.lostAt(agg.Snapshot(aggregator.SnapshotOptions{}).Elapsed)
		cfg.hooks.Log.Warn().Str("broker", cfg.NATS).Str("wait", cfg.BrokerWait.String()).
			Msg("the broker connection was lost: the aggregator resumes from its latest checkpoint and the stream once the broker is back")
		// Before its first checkpoint (training had not started) it
		// starts again from the beginning instead.
		cfg.Resume = cfg.Resume || cfg.heal.latest(0) != nil
		if agg, err = newAggregator(cfg, data, prog.point); err != nil {
			return nil, fmt.Errorf("resuming after the broker connection was lost: %w", err)
		}
		cfg.watch.SetAggregator(agg)
	}
	stalled := errors.Is(err, aggregator.ErrStalled) && res != nil
	paused := err != nil && res != nil && res.Paused && ctx.Err() == nil
	halted := ctx.Err() == nil && pausedAsStop(res, err) // its stream nearly full before training, say
	stopped := err != nil && (ctx.Err() != nil || stalled || paused || halted) && res != nil
	if err != nil && !stopped {
		bus.Close()
		return nil, err
	}
	if err := bus.Close(); err != nil && !stopped {
		return nil, err
	}
	if !stopped {
		if res.Fit != nil {
			cfg.EmbedHidden = res.Fit.Hidden // the head the label-free fit kept
		}
		f, err := aggregatorModel(cfg, data, res.Params, res.Steps)
		if err = writeModel(cfg, f, err); err != nil {
			return nil, err
		}
	}
	s := summarize(cfg, data, res, net.Name())
	s.WireBytes = broker.WireBytes(bus) // the aggregator's connection only
	s.Dropped = broker.Dropped(bus)
	s.WallSeconds = time.Since(t0).Seconds()
	if n, out := cfg.heal.resumes(); n > 0 {
		s.BrokerResumes = n
		s.BrokerOutage += out.Seconds()
	}
	if stalled {
		s, _ = net.finish(ctx, cfg, s, prog)
		return s, err
	}
	if paused || halted {
		s.StoppedBy = pauseName(cfg, s, err)
		if halted {
			err = unsealed(err)
		}
		return net.finishPaused(ctx, cfg, s, prog, err)
	}
	return stuckErr(cfg)(net.finish(ctx, cfg, s, prog))
}

// ErrUnsealed is in the error of a run whose pause the aggregator took
// as a stop (pausedAsStop): nothing answered what was in flight and no
// seal covers the log (the trust layer off, say); with checkpoints kept,
// the state was saved all the same, and --resume goes on.
var ErrUnsealed = errors.New("the log is not sealed")

// unsealed marks err with ErrUnsealed; its words stay err's.
func unsealed(err error) error { return unsealedError{err} }

type unsealedError struct{ err error }

func (e unsealedError) Error() string   { return e.err.Error() }
func (e unsealedError) Unwrap() []error { return []error{e.err, ErrUnsealed} }

// pausedAsStop reports whether the aggregator ended on a pause (its
// operator's, or its stream nearly full) that it took as an interruption
// (res.Paused false): one that came before training started, while the
// parties joined, or without checkpoints or the trust layer. It told the
// parties to stop (or, in training with checkpoints, to save their state),
// and the run is finished as an interrupted one: its summary written, an
// error wrapping ErrInterrupted and the pause's cause.
func pausedAsStop(res *aggregator.Result, err error) bool {
	return res != nil && !res.Paused && errors.Is(err, aggregator.ErrInterrupted) &&
		(errors.Is(err, aggregator.ErrPaused) || errors.Is(err, aggregator.ErrNearlyFull))
}

// stoppedFull is the error of a party whose run the aggregator stopped,
// not ended, because its stream was nearly full (with no checkpoint to
// go on from, it took its pause as a stop: aggregator.ErrNearlyFull in
// the stop's reason): the run did not finish, and --resume cannot go on
// (the stream holds the stop). nil for any other end.
func stoppedFull(st party.Stats) error {
	why, ok := strings.CutPrefix(st.StopReason, "interrupted: ")
	if st.Paused || !ok || !strings.HasPrefix(why, aggregator.ErrNearlyFull.Error()) {
		return nil
	}
	return fmt.Errorf("%w: %w: %w", ErrInterrupted, ErrStoppedByAggregator, fullStop(why))
}

// ErrStoppedByAggregator is in Participate's error when the aggregator
// stopped the run before it finished (its stream nearly full, with no
// checkpoint to go on from): the party's part did not finish, and no
// model was written.
var ErrStoppedByAggregator = errors.New("the aggregator stopped the run")

// fullStop is the aggregator's reason for a stop on a stream nearly
// full, as an error wrapping aggregator.ErrNearlyFull.
type fullStop string

func (e fullStop) Error() string { return string(e) }
func (e fullStop) Unwrap() error { return aggregator.ErrNearlyFull }

// Participate runs only party m of a run, connected to the broker at
// c.NATS, until the aggregator stops the run. It refuses a run that has
// started or ended already; if the run's stream holds messages of an
// earlier attempt of party m (refused, say), it joins as a new attempt.
func Participate(ctx context.Context, c Config, m int, hooks Hooks) (party.Stats, error) {
	cfg, wt, data, err := begin(c, hooks, false, fmt.Sprintf("party-%d", m), m)
	if err != nil {
		return party.Stats{}, err
	}
	defer wt.close()
	logPrivacy(cfg)
	if cfg.trust, err = readKeys(cfg, m); err != nil {
		return party.Stats{}, err
	}
	warnUntrusted(cfg)
	if cfg.hooks.Attackers != nil {
		if err := cfg.hooks.Attackers(&cfg.Config, data, &cfg.hooks); err != nil {
			return party.Stats{}, err
		}
	}
	wt.loaded(data)
	cfg.resplit = resplitter(cfg, data)
	if cfg.healable(m) {
		cfg.heal = &healState{}
		cfg.watch.SetHeal(cfg.heal.resumes)
	}
	net, err := openNetwork(ctx, cfg)
	if err != nil {
		return party.Stats{}, err
	}
	defer net.close()
	var lostAt time.Time
	for {
		stats, lost, err := participateOnce(ctx, cfg, net, data, m, lostAt)
		if !lost {
			return stats, err
		}
		lostAt = time.Now()
		// The broker connection was lost: the party stopped publishing.
		// It resumes from its latest checkpoint and the stream as soon as
		// the broker is back, as --resume would.
		cfg.hooks.Log.Warn().Int("party", m).Str("broker", cfg.NATS).Str("wait", cfg.BrokerWait.String()).
			Msg("the broker connection was lost: the party resumes from its latest checkpoint and the stream once the broker is back")
		// Before its first checkpoint (training had not started) it joins
		// again as a new attempt instead.
		cfg.Resume = cfg.Resume || cfg.heal.latest(m) != nil
	}
}

// participateOnce is one attempt of Participate: lost reports an attempt
// that ended because the broker connection was lost (cfg.heal), after
// which the party resumes (lostAt: when the one before lost it, zero
// for the first attempt).
func participateOnce(ctx context.Context, cfg *job, net *network, data *Data, m int, lostAt time.Time) (_ party.Stats, lost bool, err error) {
	bus, err := net.connect(ctx, fmt.Sprintf("party-%d", m))
	if err != nil {
		if cfg.heal != nil && cfg.Resume {
			err = fmt.Errorf("resuming after the broker connection was lost: %w", err)
		}
		return party.Stats{}, false, err
	}
	if !lostAt.IsZero() {
		cfg.hooks.Log.Info().Int("party", m).Str("broker", cfg.NATS).Str("after", time.Since(lostAt).Round(time.Millisecond).String()).
			Msg("the broker is back: the party resumes")
	}
	defer bus.Close()
	var base uint64
	switch {
	case cfg.Resume && !lostAt.IsZero():
		// Resuming by itself: the run had started (it has a checkpoint),
		// and a stop stored meanwhile is read with the rest (checkResume
		// is for a user's --resume).
	case cfg.Resume:
		err = net.checkResume(ctx, bus, cfg.Run)
	default:
		base, err = net.checkParty(ctx, bus, cfg.Run, m)
	}
	if err != nil {
		return party.Stats{}, false, err
	}
	var chains map[string]uint64
	if base > 0 {
		cfg.hooks.Log.Info().Int("party", m).Uint64("messages", base).Msg("the run holds an earlier attempt of this party: joining as a new attempt")
		if cfg.trust.key(m) != nil {
			// Its chains restart after the earlier attempt's messages,
			// each subject on its own.
			chains = map[string]uint64{}
			for _, s := range cfg.trust.roster.Subjects(trust.PartyID(m)) {
				if chains[s], err = count(ctx, bus, s); err != nil {
					return party.Stats{}, false, err
				}
			}
		}
	}
	var ck *party.Checkpoint
	p, close, err := newParty(ctx, cfg, data, m, base, chains, &ck)
	if err != nil {
		return party.Stats{}, false, err
	}
	defer close()
	cfg.watch.SetParty(m, p)
	cfg.watch.SetBus(fmt.Sprintf("party-%d", m), bus)
	if cfg.Resume {
		if err := resumeParty(ctx, bus, cfg, p, ck, m); err != nil {
			return party.Stats{}, false, err
		}
	} else {
		cfg.hooks.Log.Info().Int("party", m).Str("run", cfg.Run).Msg("joining; waiting for the aggregator's start")
	}
	lctx, cancel := watchLoss(ctx, bus)
	err = p.Run(lctx, bus)
	lost = lostConn(ctx, lctx, err)
	cancel(nil)
	if lost {
		return p.Stats(), true, err
	}
	if err == nil {
		err = stoppedFull(p.Stats())
	}
	if err == nil {
		f, ferr := partyModel(cfg, data, m, p.Params())
		err = writeModel(cfg, f, ferr)
	}
	if errors.Is(err, party.ErrInterrupted) {
		err = fmt.Errorf("%w: %w", ErrInterrupted, err)
	}
	if cerr := bus.Close(); err == nil {
		err = cerr
	}
	return p.Stats(), false, err
}
