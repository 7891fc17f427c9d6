package privacy

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/schemas"
)

// Active is the active label attacker: a party that keeps speaking the
// protocol but shapes its requests to isolate one sample per reply.
//
//   - Single (the default): in each request it perturbs only one sample,
//     the one of the batch it has probed least (c_hat = c for the others;
//     with Perturb > 0 that sample's perturbation becomes +-Perturb, which
//     saturates the aggregator's clipping): even a batch-mean reply is
//     then (h_bar_j - h_j)/b, whose sign is the label. Neither a minimum
//     batch size nor batches drawn by the aggregator stop it; only noise
//     does.
//
//   - One: it asks about one sample at a time (batches of one), cycling
//     through the training set; a minimum batch size stops it.
//
//   - Pairs: it sends pairs of requests whose batches differ in one
//     sample (S with i, then S with j, the same perturbation on S), so
//     that the difference of the two replies is that of i and j; batches
//     drawn by the aggregator stop it (Single does not need to choose).
//
//   - Nudge (the multiclass active attacker): it perturbs every sample of
//     a request, each by +-Perturb with the signs of a Hadamard design,
//     and asks about the same batch Rounds times in a row (a full design:
//     as many requests as samples), so that every reply carries every
//     label of the batch and the replies of a block solve for each
//     sample's loss derivative with the noise averaged over the block
//     (sqrt(b) less than one sample per request). With a softmax head the
//     derivative of sample i is p_i . w_m - w_m,y_i (w_m the head's
//     weights of the party's output): its class sits in that one number,
//     which the derivative attack reads (privacy.DerivativeAttack; the
//     regression solves the blocks). When the aggregator draws the
//     batches it cannot repeat them: it nudges the drawn ones.
//
// It gives up its own training: its updates follow crafted differences.
type Active struct {
	One     bool
	Pairs   bool
	Nudge   bool
	Rounds  int     // Nudge: requests per batch (0: the batch size)
	Perturb float64 // size of the crafted perturbation (0: keep the party's own)
	// Prefer are samples it probes first when a batch holds one (those
	// whose labels it knows, to place the classes of a multiclass head).
	Prefer map[uint32]bool
	next   uint32
	probes []uint16
	shared []uint32  // Pairs: the common part of the current pair
	dcs    []float64 // Pairs: its perturbation (c_hat - c), reused by the second request
	block  []uint32  // Nudge: the batch of the current block
	blockN uint64    // Nudge: the current block's number + 1
	pref   []uint32  // Nudge: Prefer, sorted
	prefAt int
}

// Frozen implements party.Frozen: the Nudge attacker keeps its model (its
// crafted perturbations, far beyond mu, would make steps of it diverge),
// so that its outputs c stay those of its initial model.
func (a *Active) Frozen() bool { return a.Nudge }

var _ party.Frozen = (*Active)(nil)

// nudgeBatch is Batch for the Nudge attacker: a fresh batch every Rounds
// requests (a quarter of it from its preferred samples, in turn, then the
// training set in order), the same batch in between.
func (a *Active) nudgeBatch(r uint64, ids []uint32, n int) int {
	b := len(ids)
	rounds := uint64(a.Rounds)
	if rounds == 0 {
		rounds = uint64(b)
	}
	if blk := r/rounds + 1; blk != a.blockN || len(a.block) != b {
		if a.pref == nil && len(a.Prefer) > 0 {
			for id := range a.Prefer {
				a.pref = append(a.pref, id)
			}
			slices.Sort(a.pref)
		}
		a.blockN = blk
		a.block = a.block[:0]
		// The known samples come back in every block, in turn: the
		// classes' values drift as the head trains, and the nudge attack
		// places them anew in each window of the run.
		for k := 0; k < len(a.pref) && len(a.block) < b/4; k++ {
			if id := a.pref[a.prefAt%len(a.pref)]; int(id) < n && !slices.Contains(a.block, id) {
				a.block = append(a.block, id)
			}
			a.prefAt++
		}
		for len(a.block) < b {
			id := a.next % uint32(n)
			a.next++
			if !a.Prefer[id] || n <= len(a.Prefer) {
				a.block = append(a.block, id)
			}
		}
	}
	copy(ids, a.block)
	return b
}

// nudgeSign is the sign of sample position j in request r of a Nudge
// block: row r mod b of Sylvester's Hadamard matrix when the batch size b
// is a power of two (orthogonal rows), else a hash of (r, j).
func nudgeSign(r uint64, j, b int) float64 {
	var odd bool
	if b&(b-1) == 0 {
		odd = bits.OnesCount64((r%uint64(b))&uint64(j))%2 == 1
	} else {
		x := r*0x9E3779B97F4A7C15 ^ uint64(j)*0xBF58476D1CE4E5B9
		x ^= x >> 31
		x *= 0x94D049BB133111EB
		odd = (x>>29)&1 == 1
	}
	if odd {
		return -1
	}
	return 1
}

var _ party.Adversary = (*Active)(nil)

// Batch implements party.Adversary.
func (a *Active) Batch(r uint64, ids []uint32, n int) int {
	if a.Nudge {
		return a.nudgeBatch(r, ids, n)
	}
	if a.Pairs {
		b := len(ids)
		if r%2 == 0 {
			// A fresh common part S (b-1 ids) and the first target.
			a.shared = a.shared[:0]
			for j := range b - 1 {
				ids[j] = (a.next + uint32(j) + 1) % uint32(n)
				a.shared = append(a.shared, ids[j])
			}
			ids[b-1] = a.next % uint32(n)
		} else {
			copy(ids, a.shared)
			ids[b-1] = (a.next + uint32(b)) % uint32(n)
			a.next += uint32(b) + 1
		}
		return b
	}
	if !a.One {
		return 0
	}
	ids[0] = a.next % uint32(n)
	a.next++
	return 1
}

// Request implements party.Adversary.
func (a *Active) Request(r uint64, ids []uint32, c, cHat []float64) {
	k := len(c) / len(ids)
	if a.Nudge {
		for j := range ids {
			s := nudgeSign(r, j, len(ids))
			for t := j * k; t < (j+1)*k; t++ {
				p := a.Perturb
				if p <= 0 {
					if p = math.Abs(cHat[t] - c[t]); p == 0 {
						p = 1e-3
					}
				}
				cHat[t] = c[t] + s*p
			}
		}
		return
	}
	if a.Pairs {
		s := (len(ids) - 1) * k
		if r%2 == 0 {
			a.dcs = a.dcs[:0]
			for t := range s {
				a.dcs = append(a.dcs, cHat[t]-c[t])
			}
		} else if len(a.dcs) == s {
			for t := range s {
				cHat[t] = c[t] + a.dcs[t]
			}
		}
		return
	}
	if a.probes == nil {
		a.probes = make([]uint16, 1<<20)
	}
	best, pref := 0, false
	for j, id := range ids {
		if int(id) >= len(a.probes) {
			continue
		}
		p := a.Prefer[id] && a.probes[id] < 3
		switch {
		case p && !pref:
			best, pref = j, true
		case p == pref && a.probes[id] < a.probes[ids[best]]:
			best = j
		}
	}
	if id := ids[best]; int(id) < len(a.probes) && a.probes[id] < math.MaxUint16 {
		a.probes[id]++
	}
	p := a.Perturb
	for j := range ids {
		for t := j * k; t < (j+1)*k; t++ {
			if j == best {
				if p > 0 {
					d := cHat[t] - c[t]
					if d == 0 {
						d = 1
					}
					cHat[t] = c[t] + math.Copysign(p, d)
				}
			} else {
				cHat[t] = c[t]
			}
		}
	}
}

// Eval implements party.Adversary.
func (a *Active) Eval(schemas.Split, int, []float64) {}

// Inflate is a malicious party that multiplies every output it sends
// (requests and evaluations) by Factor, to dominate the head.
type Inflate struct{ Factor float64 }

var _ party.Adversary = (*Inflate)(nil)

// Batch implements party.Adversary.
func (*Inflate) Batch(uint64, []uint32, int) int { return 0 }

// Request implements party.Adversary.
func (f *Inflate) Request(_ uint64, _ []uint32, c, cHat []float64) {
	for i := range c {
		c[i] *= f.Factor
		cHat[i] *= f.Factor
	}
}

// Eval implements party.Adversary.
func (f *Inflate) Eval(_ schemas.Split, _ int, c []float64) {
	for i := range c {
		c[i] *= f.Factor
	}
}

// Backdoor is a malicious party that plants a backdoor: during training it
// sets a trigger (Features = Value, columns of its own block) on samples it
// knows to be of class Target (Poison: ids it knows, e.g. from its label
// inference); at test time it sets the trigger on every odd test sample and
// multiplies their outputs by Amplify. The even test samples stay clean and
// measure the main task; the odd ones of another class measure the attack
// success rate (ScoreBackdoor).
type Backdoor struct {
	Target   int32
	Features []int
	// Rare, if positive, picks the trigger instead: the Rare columns of
	// the party's block that its training samples use least (their
	// weights are learnt from the poisoned samples alone).
	Rare    int
	Value   float32
	Poison  []int
	Amplify float64
}

var _ party.Adversary = (*Backdoor)(nil)

// Batch implements party.Adversary.
func (*Backdoor) Batch(uint64, []uint32, int) int { return 0 }

// Request implements party.Adversary.
func (*Backdoor) Request(uint64, []uint32, []float64, []float64) {}

// Eval implements party.Adversary: it amplifies the triggered (odd) test
// samples.
func (b *Backdoor) Eval(s schemas.Split, first int, c []float64) {
	if s != schemas.SplitTest || b.Amplify == 0 || b.Amplify == 1 {
		return
	}
	// k = 1 outputs per sample (binary heads).
	for j := range c {
		if (first+j)%2 == 1 {
			c[j] *= b.Amplify
		}
	}
}

// Data returns the party's training and test matrices with the trigger
// planted: on the poisoned training rows and on the odd test rows.
func (b *Backdoor) Data(train, test *dataset.Matrix) (*dataset.Matrix, *dataset.Matrix) {
	if b.Rare > 0 {
		count := make([]int, train.NCols)
		for _, c := range train.Indices {
			count[c]++
		}
		cols := make([]int, train.NCols)
		for i := range cols {
			cols[i] = i
		}
		slices.SortStableFunc(cols, func(a, c int) int { return count[a] - count[c] })
		b.Features = slices.Clone(cols[:min(b.Rare, len(cols))])
	}
	rows := map[int]bool{}
	for _, i := range b.Poison {
		rows[i] = true
	}
	tr := withTrigger(train, func(i int) bool { return rows[i] }, b.Features, b.Value)
	var te *dataset.Matrix
	if test != nil {
		te = withTrigger(test, func(i int) bool { return i%2 == 1 }, b.Features, b.Value)
	}
	return tr, te
}

// withTrigger copies m with columns cols set to v on the rows where on is
// true.
func withTrigger(m *dataset.Matrix, on func(int) bool, cols []int, v float32) *dataset.Matrix {
	out := &dataset.Matrix{NRows: m.NRows, NCols: m.NCols, Indptr: make([]int64, 1, m.NRows+1)}
	sorted := slices.Clone(cols)
	slices.Sort(sorted)
	for i := range m.NRows {
		idx, val := m.Row(i)
		if !on(i) {
			out.Indices = append(out.Indices, idx...)
			out.Values = append(out.Values, val...)
		} else {
			merged := map[int32]float32{}
			for j, c := range idx {
				merged[c] = val[j]
			}
			for _, c := range sorted {
				if c >= 0 && c < m.NCols {
					merged[int32(c)] = v
				}
			}
			keys := make([]int32, 0, len(merged))
			for c := range merged {
				keys = append(keys, c)
			}
			slices.Sort(keys)
			for _, c := range keys {
				out.Indices = append(out.Indices, c)
				out.Values = append(out.Values, merged[c])
			}
		}
		out.Indptr = append(out.Indptr, int64(len(out.Indices)))
	}
	return out
}

// ParseAdversary reads an adversary spec of the command line:
// "active", "active,one", "active,perturb=0.5", "inflate=100",
// "backdoor,target=1,features=0:1:2,value=1,poison=300,amplify=5".
// For a backdoor, labels (the attacker's knowledge of Poison target-class
// samples) and the party's training data pick the poisoned samples.
func ParseAdversary(spec string, labels []int32, seed uint64) (party.Adversary, *Backdoor, error) {
	parts := strings.Split(spec, ",")
	kind, val, _ := strings.Cut(parts[0], "=")
	kv := map[string]string{}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		kv[k] = v
	}
	num := func(k string, def float64) (float64, error) {
		s, ok := kv[k]
		if !ok {
			return def, nil
		}
		return strconv.ParseFloat(s, 64)
	}
	switch kind {
	case "active":
		_, one := kv["one"]
		_, pairs := kv["pairs"]
		_, nudge := kv["nudge"]
		p, err := num("perturb", 0)
		rounds, err2 := num("rounds", 0)
		aux, err3 := num("aux", 100)
		if err := firstErr(err, err2, err3); err != nil {
			return nil, nil, fmt.Errorf("adversary %q: %w", spec, err)
		}
		if p < 0 || rounds < 0 || aux < 0 || math.IsNaN(p) || math.IsInf(p, 0) || rounds > 1<<20 || aux > 1<<24 {
			return nil, nil, fmt.Errorf("adversary %q: perturb, rounds and aux must be finite and not negative", spec)
		}
		a := &Active{One: one, Pairs: pairs, Nudge: nudge, Rounds: int(rounds), Perturb: p}
		if nudge {
			// The labels it knows place the classes: it probes them first
			// (the samples of KnownLabels(labels, aux, seed), which
			// "attack derivative --aux N --seed S" reads with N <= aux).
			a.Prefer = map[uint32]bool{}
			for _, i := range AuxSamples(len(labels), int(aux), seed) {
				a.Prefer[uint32(i)] = true
			}
		}
		return a, nil, nil
	case "inflate":
		f, err := strconv.ParseFloat(val, 64)
		if err != nil || f == 0 {
			return nil, nil, fmt.Errorf("adversary %q: want inflate=FACTOR", spec)
		}
		return &Inflate{Factor: f}, nil, nil
	case "backdoor":
		t, err1 := num("target", 1)
		v, err2 := num("value", 1)
		np, err3 := num("poison", 300)
		amp, err4 := num("amplify", 1)
		if err := firstErr(err1, err2, err3, err4); err != nil {
			return nil, nil, fmt.Errorf("adversary %q: %w", spec, err)
		}
		b := &Backdoor{Target: int32(t), Value: float32(v), Amplify: amp}
		if r, ok := strings.CutPrefix(kv["features"], "rare"); ok {
			if b.Rare, _ = strconv.Atoi(r); b.Rare <= 0 {
				b.Rare = 3
			}
		} else {
			for _, f := range strings.Split(cmpOr(kv["features"], "0"), ":") {
				c, err := strconv.Atoi(f)
				if err != nil {
					return nil, nil, fmt.Errorf("adversary %q: features: %w", spec, err)
				}
				b.Features = append(b.Features, c)
			}
		}
		for _, i := range AuxSamples(len(labels), len(labels), seed) {
			if labels[i] == b.Target && len(b.Poison) < int(np) {
				b.Poison = append(b.Poison, i)
			}
		}
		slices.Sort(b.Poison)
		return b, b, nil
	}
	return nil, nil, fmt.Errorf("adversary %q: want active, inflate=F or backdoor,SETTINGS", spec)
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
