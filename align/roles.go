package align

import (
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/schemas"
)

// produceSet hashes the own keys in the shuffled order, raises them to
// the own scalar and sends them, chunk by chunk, to every peer.
func (o *org) produceSet(keys []string, tmpl schemas.AlignMsg) error {
	t0 := time.Now()
	n := len(keys)
	shuffled := make([]string, ChunkItems)
	chunk := make([]byte, ChunkItems*ElementSize)
	for lo := 0; lo < n; lo += ChunkItems {
		hi := min(lo+ChunkItems, n)
		for i := lo; i < hi; i++ {
			shuffled[i-lo] = keys[o.perm[i]]
		}
		c := chunk[:(hi-lo)*ElementSize]
		if err := o.sec.hashMask(c, shuffled[:hi-lo], o.dst); err != nil {
			return err
		}
		o.cfg.Progress.Hashed.Add(int64(hi - lo))
		for peer := range o.pubs {
			m := tmpl
			m.Phase, m.Total, m.Offset, m.Data = schemas.AlignSet, uint64(n), uint64(lo), c
			if err := o.send(o.ctx, peer, &m); err != nil {
				return err
			}
		}
		o.cfg.Progress.Sent.Add(int64(hi - lo))
	}
	o.stats.HashSeconds = time.Since(t0).Seconds()
	return nil
}

// hub runs the hub's side: it waits for every party to state its set's
// size and refuses a party over the bound (Config.MaxRatio) before it
// sends anything of its own; then it states its own size and sends its
// set to every party, raises each party's set to its scalar, collects
// each party's echo of its own set, matches, and sends every party its
// rows of the intersection in one random common order.
func (o *org) hub(keys []string) (*Result, error) {
	q, n0 := o.cfg.Parties, len(keys)
	bound := Bound(o.cfg.MaxRatio, n0)
	if bound < 0 {
		o.cfg.Log.Warn().Int("hub_keys", n0).Msg("align: no bound on the parties' sets (--max-ratio 0): a party may test any number of keys against the hub's")
	}
	type peerState struct {
		size      int // stated; 0 until then
		set, echo phaseIn
		index     map[[schemas.AlignEchoSize]byte]uint32
		width     int
	}
	peers := make([]peerState, q+1)
	sized := 0
	startOwn := func() error {
		sizes := zerolog.Arr()
		for m := 1; m <= q; m++ {
			sizes.Int(peers[m].size)
		}
		o.cfg.Log.Info().Int("hub_keys", n0).Array("party_keys", sizes).Float64("max_ratio", o.cfg.MaxRatio).Int("bound", bound).
			Msg("align: every party's set is within the bound; the hub states its size and sends its set")
		for m := 1; m <= q; m++ {
			if err := o.send(o.ctx, m, &schemas.AlignMsg{Phase: schemas.AlignSize, Total: uint64(n0), Spec: o.cfg.Spec}); err != nil {
				return err
			}
		}
		go func() {
			err := o.produceSet(keys, schemas.AlignMsg{Spec: o.cfg.Spec})
			o.push(event{from: 0, err: err})
		}()
		return nil
	}
	lastSeen := map[int]time.Time{}
	now := time.Now()
	for m := 1; m <= q; m++ {
		lastSeen[m] = now
	}
	ownSent := false
	waiting := func(m int) string {
		switch {
		case m == 0:
			return ""
		case peers[m].size == 0:
			return "its set's size"
		case !peers[m].set.done():
			return fmt.Sprintf("its set (%d of %d items)", peers[m].set.got, peers[m].size)
		case !peers[m].echo.done():
			return fmt.Sprintf("its echo of the hub's set (%d of %d items)", peers[m].echo.got, n0)
		}
		return ""
	}
	pending := 2 * q
	var tmp []byte
	var maskTime time.Duration
	for pending > 0 || !ownSent {
		ev, err := o.next(lastSeen, waiting)
		if err != nil {
			return nil, err
		}
		if ev.from == 0 { // own set sent, or failed
			if ev.err != nil {
				return nil, ev.err
			}
			ownSent = true
			continue
		}
		skip, err := common(ev)
		if err != nil {
			return nil, err
		}
		if skip {
			continue
		}
		m, p := ev.msg, &peers[ev.from]
		who := orgName(ev.from)
		switch m.Phase {
		case schemas.AlignSize:
			if m.Spec != o.cfg.Spec {
				return nil, fmt.Errorf("%w: %s's key specification is %q, the hub's %q: give every organisation the same --key columns and normalisation flags", ErrPeer, who, m.Spec, o.cfg.Spec)
			}
			if p.size != 0 {
				return nil, fmt.Errorf("%w: %s stated its set's size twice", ErrPeer, who)
			}
			if m.Total == 0 {
				return nil, fmt.Errorf("%w: %s has no keys", ErrPeer, who)
			}
			o.cfg.Log.Info().Str("party", who).Uint64("keys", m.Total).Int("hub_keys", n0).Int("bound", bound).Msg("align: a party states its set's size")
			if bound >= 0 && m.Total > uint64(bound) {
				return nil, fmt.Errorf("%w: %s states a set of %d keys, more than %g times the hub's %d (at most %d); nothing of the hub's set was sent. "+
					"A party's set bounds how many of the hub's keys it can test: if every organisation agrees to more, give the hub a larger --max-ratio (0: no bound)",
					ErrOversize, who, m.Total, o.cfg.MaxRatio, n0, bound)
			}
			p.size, p.width = int(m.Total), int(m.Width)
			p.index = make(map[[schemas.AlignEchoSize]byte]uint32, p.size)
			if sized++; sized == q {
				if err := startOwn(); err != nil {
					return nil, err
				}
			}
		case schemas.AlignSet:
			if p.size == 0 {
				return nil, fmt.Errorf("%w: %s sent its set before stating its size%s", ErrPeer, who, versionHint(m.Spec, o.cfg.Spec))
			}
			if !p.set.begun && m.Spec != o.cfg.Spec {
				return nil, fmt.Errorf("%w: %s's key specification is %q, the hub's %q: give every organisation the same --key columns and normalisation flags", ErrPeer, who, m.Spec, o.cfg.Spec)
			}
			base := p.set.got
			if err := p.set.add(ev.from, m, p.size); err != nil {
				return nil, err
			}
			p.set.data = p.set.data[:0] // raised and indexed at once, not kept
			k := m.Items()
			if cap(tmp) < k*schemas.AlignEchoSize {
				tmp = make([]byte, k*schemas.AlignEchoSize)
			}
			tmp = tmp[:k*schemas.AlignEchoSize]
			t0 := time.Now()
			if err := o.sec.mask(tmp, m.Data, schemas.AlignEchoSize, base); err != nil {
				return nil, fmt.Errorf("%w: %s's set: %w", ErrPeer, who, err)
			}
			maskTime += time.Since(t0)
			o.cfg.Progress.Masked.Add(int64(k))
			o.cfg.Progress.Received.Add(int64(k))
			for i := range k {
				var key [schemas.AlignEchoSize]byte
				copy(key[:], tmp[i*schemas.AlignEchoSize:])
				if _, dup := p.index[key]; dup {
					return nil, fmt.Errorf("%w: %s's set holds the same element twice (item %d)", ErrPeer, who, base+i)
				}
				p.index[key] = uint32(base + i)
			}
			if p.set.done() {
				pending--
			}
		case schemas.AlignEcho:
			if !p.set.done() {
				return nil, fmt.Errorf("%w: %s sent its echo before its whole set", ErrPeer, who)
			}
			if err := p.echo.add(ev.from, m, n0); err != nil {
				return nil, err
			}
			o.cfg.Progress.Received.Add(int64(m.Items()))
			if p.echo.done() {
				pending--
			}
		default:
			return nil, fmt.Errorf("%w: %s sent a %s message to the hub", ErrPeer, who, m.Phase)
		}
	}
	o.stats.MaskSeconds = maskTime.Seconds()

	// Match: hub position j is in the intersection if every party's echo
	// of it is one of that party's elements.
	t0 := time.Now()
	var in []int
	idx := make([][]uint32, q+1)
	cur := make([]uint32, q+1)
	for j := range n0 {
		ok := true
		for m := 1; m <= q && ok; m++ {
			var key [schemas.AlignEchoSize]byte
			copy(key[:], peers[m].echo.data[j*schemas.AlignEchoSize:])
			cur[m], ok = peers[m].index[key]
		}
		if ok {
			in = append(in, j)
			for m := 1; m <= q; m++ {
				idx[m] = append(idx[m], cur[m])
			}
		}
	}
	var seed [32]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, err
	}
	order := mrand.New(mrand.NewChaCha8(seed)).Perm(len(in))
	res := &Result{Parties: q, Rows: make([]int, len(in)), HubSize: n0, PartySizes: make([]int, q), Widths: make([]int, q), MaxRatio: o.cfg.MaxRatio, MaxParty: bound}
	for k, r := range order {
		res.Rows[k] = o.perm[in[r]]
	}
	lo := 0
	los := make([]int, q+1)
	for m := 1; m <= q; m++ {
		los[m] = lo
		lo += peers[m].width
		res.PartySizes[m-1] = peers[m].set.total
		res.Widths[m-1] = peers[m].width
		peers[m].index, peers[m].echo.data = nil, nil
	}
	res.Features = lo
	if o.cfg.Labels != nil {
		res.Classes = countClasses(o.cfg.Labels, res.Rows)
	}
	o.stats.MatchSeconds = time.Since(t0).Seconds()
	o.cfg.Progress.Matched.Store(true)
	layout := u32(make([]byte, 0, (q+1)*schemas.AlignIndexSize), uint32(res.Classes))
	for _, w := range res.Widths {
		layout = u32(layout, uint32(w))
	}
	buf := make([]byte, 0, max(len(in), q+1)*schemas.AlignIndexSize)
	for m := 1; m <= q; m++ {
		tmpl := schemas.AlignMsg{Features: uint32(lo), Parties: uint32(q)}
		if err := o.sendItems(m, schemas.AlignLayout, layout, schemas.AlignIndexSize, tmpl); err != nil {
			return nil, err
		}
	}
	for m := 1; m <= q; m++ {
		buf = buf[:0]
		for _, r := range order {
			buf = u32(buf, idx[m][r])
		}
		tmpl := schemas.AlignMsg{Width: uint32(los[m]), Features: uint32(lo), Parties: uint32(q)}
		if err := o.sendItems(m, schemas.AlignResult, buf, schemas.AlignIndexSize, tmpl); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// versionHint explains a message out of turn by another protocol version
// when the peer's specification differs ("" when it does not).
func versionHint(peer, own string) string {
	if peer == own {
		return ""
	}
	return fmt.Sprintf(" (its specification %q, this organisation's %q: every organisation needs the same asyrevel protocol version, %s)", peer, own, ProtocolVersion)
}

// countClasses counts the distinct labels of rows.
func countClasses(labels []float64, rows []int) int {
	seen := make(map[float64]struct{}, 8)
	for _, r := range rows {
		if r < len(labels) {
			seen[labels[r]] = struct{}{}
		}
	}
	return len(seen)
}

// push queues an event of this organisation's own.
func (o *org) push(ev event) {
	o.qmu.Lock()
	o.queue = append(o.queue, ev)
	o.qmu.Unlock()
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// party runs a party's side: it sends its set, raises the hub's set to
// its scalar and sends that back (truncated) in the hub's order, and
// reads its rows of the intersection from the hub's result.
func (o *org) party(keys []string) (*Result, error) {
	n := len(keys)
	if err := o.send(o.ctx, 0, &schemas.AlignMsg{Phase: schemas.AlignSize, Total: uint64(n), Spec: o.cfg.Spec, Width: uint32(o.cfg.Width)}); err != nil {
		return nil, err
	}
	if err := o.produceSet(keys, schemas.AlignMsg{Spec: o.cfg.Spec, Width: uint32(o.cfg.Width)}); err != nil {
		return nil, err
	}
	var hubSet, layout, result phaseIn
	hubSize := 0
	lastSeen := map[int]time.Time{0: time.Now()}
	waiting := func(int) string {
		switch {
		case hubSize == 0:
			return "the hub's set's size (the hub states it when every party's set is within its bound)"
		case !hubSet.done():
			return fmt.Sprintf("the hub's set (%d of %d items)", hubSet.got, hubSet.total)
		case !layout.done():
			return "the layout"
		case !result.done():
			return "the result"
		}
		return ""
	}
	var echo []byte
	var maskTime time.Duration
	var lo, feats, parties int
	for !result.done() {
		ev, err := o.next(lastSeen, waiting)
		if err != nil {
			return nil, err
		}
		skip, err := common(ev)
		if err != nil {
			return nil, err
		}
		if skip {
			continue
		}
		m := ev.msg
		switch m.Phase {
		case schemas.AlignSize:
			if m.Spec != o.cfg.Spec {
				return nil, fmt.Errorf("%w: the hub's key specification is %q, %s's %q: give every organisation the same --key columns and normalisation flags", ErrPeer, m.Spec, orgName(o.cfg.ID), o.cfg.Spec)
			}
			if hubSize != 0 {
				return nil, fmt.Errorf("%w: the hub stated its set's size twice", ErrPeer)
			}
			if m.Total == 0 {
				return nil, fmt.Errorf("%w: the hub has no keys", ErrPeer)
			}
			hubSize = int(m.Total)
			o.cfg.Log.Info().Int("hub_keys", hubSize).Int("keys", n).Msg("align: the hub states its set's size")
		case schemas.AlignSet:
			if hubSize == 0 {
				return nil, fmt.Errorf("%w: the hub sent its set before stating its size%s", ErrPeer, versionHint(m.Spec, o.cfg.Spec))
			}
			if !hubSet.begun && m.Spec != o.cfg.Spec {
				return nil, fmt.Errorf("%w: the hub's key specification is %q, %s's %q: give every organisation the same --key columns and normalisation flags", ErrPeer, m.Spec, orgName(o.cfg.ID), o.cfg.Spec)
			}
			base := hubSet.got
			if err := hubSet.add(0, m, hubSize); err != nil {
				return nil, err
			}
			hubSet.data = hubSet.data[:0]
			k := m.Items()
			if cap(echo) < k*schemas.AlignEchoSize {
				echo = make([]byte, k*schemas.AlignEchoSize)
			}
			echo = echo[:k*schemas.AlignEchoSize]
			t0 := time.Now()
			if err := o.sec.mask(echo, m.Data, schemas.AlignEchoSize, base); err != nil {
				return nil, fmt.Errorf("%w: the hub's set: %w", ErrPeer, err)
			}
			maskTime += time.Since(t0)
			o.cfg.Progress.Masked.Add(int64(k))
			o.cfg.Progress.Received.Add(int64(k))
			reply := schemas.AlignMsg{Phase: schemas.AlignEcho, Total: uint64(hubSet.total), Offset: uint64(base), Data: echo}
			if err := o.send(o.ctx, 0, &reply); err != nil {
				return nil, err
			}
			o.cfg.Progress.Sent.Add(int64(k))
		case schemas.AlignLayout:
			if !hubSet.done() || result.begun {
				return nil, fmt.Errorf("%w: the hub sent the layout out of turn (after the whole set, before the result)", ErrPeer)
			}
			if err := layout.add(0, m, o.cfg.Parties+1); err != nil {
				return nil, err
			}
		case schemas.AlignResult:
			if !hubSet.done() || !layout.done() {
				return nil, fmt.Errorf("%w: the hub sent the result before its whole set and the layout", ErrPeer)
			}
			if !result.begun {
				lo, feats, parties = int(m.Width), int(m.Features), int(m.Parties)
				if m.Total > uint64(min(n, hubSet.total)) {
					return nil, fmt.Errorf("%w: the hub's result has %d rows, more than %s's %d or the hub's %d", ErrPeer, m.Total, orgName(o.cfg.ID), n, hubSet.total)
				}
				if parties != o.cfg.Parties || lo+o.cfg.Width > feats {
					return nil, fmt.Errorf("%w: the hub's result lays out %d parties and columns [%d,%d) of %d", ErrPeer, parties, lo, lo+o.cfg.Width, feats)
				}
			}
			if err := result.add(0, m, -1); err != nil {
				return nil, err
			}
			o.cfg.Progress.Received.Add(int64(m.Items()))
		default:
			return nil, fmt.Errorf("%w: the hub sent a %s message to %s", ErrPeer, m.Phase, orgName(o.cfg.ID))
		}
	}
	o.stats.MaskSeconds = maskTime.Seconds()
	res := &Result{Rows: make([]int, result.total), Lo: lo, Features: feats, Parties: parties, HubSize: hubSet.total}
	if err := o.readLayout(res, layout.data); err != nil {
		return nil, err
	}
	seen := make([]bool, n)
	for k := range result.total {
		p := int(leU32(result.data[k*schemas.AlignIndexSize:]))
		if p >= n {
			return nil, fmt.Errorf("%w: the hub's result names item %d of %s's %d", ErrPeer, p, orgName(o.cfg.ID), n)
		}
		if seen[p] {
			return nil, fmt.Errorf("%w: the hub's result names item %d twice", ErrPeer, p)
		}
		seen[p] = true
		res.Rows[k] = o.perm[p]
	}
	return res, nil
}

// readLayout reads the hub's layout into res (a party's) and checks it
// against the result's: the widths add up to the joint width, this party's
// is its own, and its first column follows the parties before it.
func (o *org) readLayout(res *Result, data []byte) error {
	q := o.cfg.Parties
	if len(data) != (q+1)*schemas.AlignIndexSize {
		return fmt.Errorf("%w: the hub's layout has %d bytes, want %d", ErrPeer, len(data), (q+1)*schemas.AlignIndexSize)
	}
	res.Classes = int(leU32(data))
	res.Widths = make([]int, q)
	sum, lo := 0, 0
	for m := 1; m <= q; m++ {
		w := int(leU32(data[m*schemas.AlignIndexSize:]))
		if w == 0 {
			return fmt.Errorf("%w: the hub's layout gives %s no column", ErrPeer, orgName(m))
		}
		if m == o.cfg.ID {
			lo = sum
		}
		res.Widths[m-1] = w
		sum += w
	}
	if sum != res.Features || res.Widths[o.cfg.ID-1] != o.cfg.Width || lo != res.Lo {
		return fmt.Errorf("%w: the hub's layout %v (%d columns; %s's from %d) differs from its result (%d columns; %s's %d from %d)",
			ErrPeer, res.Widths, sum, orgName(o.cfg.ID), lo, res.Features, orgName(o.cfg.ID), o.cfg.Width, res.Lo)
	}
	return nil
}
