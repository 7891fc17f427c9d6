package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/zoo"
)

// Direction draws u from dist with rng and writes wp = w + mu u: the
// perturbation of a zeroth-order step, the party's and the head's alike.
func Direction(dist zoo.Dist, rng *rand.Rand, mu float64, w, wp, u []float64) {
	dist.Draw(rng, u)
	zoo.Perturb(wp, w, u, mu)
}

// Probe is the party's half of a step before its request: it draws the
// direction u and writes wp = w + mu u (Direction), then c = F(w; x_ids)
// and chat = F(wp; x_ids). c and chat have len(ids) * F.OutDim() elements.
func Probe(f model.Local, x *dataset.Matrix, ids []uint32, dist zoo.Dist, rng *rand.Rand, mu float64, w, wp, u, c, chat []float64) {
	Direction(dist, rng, mu, w, wp, u)
	f.Forward(w, x, ids, c)
	f.Forward(wp, x, ids, chat)
}

// RegDiff is the party's regularisation term of the two-point difference,
// lambda (g(wp) - g(w)), or 0 without a regulariser or with lambda 0.
func RegDiff(reg model.Regularizer, lambda float64, w, wp []float64) float64 {
	if reg == nil || lambda == 0 {
		return 0
	}
	return lambda * (reg.Value(wp) - reg.Value(w))
}

// Coef is the scalar of a zeroth-order update, -eta (phi/mu) diff, so that
// the update is w += Coef u. It is evaluated in this order, always, so that
// every caller gets the same bits.
func Coef(eta, phi, mu, diff float64) float64 {
	return -eta * phi / mu * diff
}

// Update takes the zeroth-order step w <- w - eta (phi/mu) diff u. It
// reports false, and leaves w as it is, if the step's scalar is not finite.
func Update(w, u []float64, eta, phi, mu, diff float64) bool {
	s := Coef(eta, phi, mu, diff)
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return false
	}
	zoo.AddScaled(w, s, u)
	return true
}

// MeanDiff is mean_i(hb_i - h_i), the party's two-point difference from a
// reply of per-sample losses. It panics if the lengths differ or are 0.
func MeanDiff(h, hb []float64) float64 {
	if len(h) != len(hb) || len(h) == 0 {
		panic(fmt.Sprintf("kernel: MeanDiff lengths %d, %d", len(h), len(hb)))
	}
	var d float64
	for i, v := range h {
		d += hb[i] - v
	}
	return d / float64(len(h))
}

// Sum is the sum of d, summed in order (the difference that a reply of
// per-sample differences carries is their Sum divided by the batch).
func Sum(d []float64) float64 {
	var s float64
	for _, v := range d {
		s += v
	}
	return s
}

// Answer is the aggregator's reply for one sample, whose table row is row
// and whose label is y: it stores the fresh output c in the party's slot
// row[lo:lo+len(c)] first, then computes h = F_0(w0, row) and
// hb = F_0(w0, row with chat in the slot), and leaves c in the slot.
//
// h must come from the fresh c, not from the older stored value: see
// DESIGN.md, "Pitfall".
func Answer(head model.Head, w0, row []float64, lo int, c, chat []float64, y int32) (h, hb float64) {
	copy(row[lo:lo+len(c)], c)
	h = head.Loss(w0, row, y)
	return h, Bar(head, w0, row, lo, c, chat, y)
}

// Bar is h_bar for one sample whose row holds the fresh c in the party's
// slot at lo: F_0(w0, row with chat in the slot). It leaves c in the slot.
func Bar(head model.Head, w0, row []float64, lo int, c, chat []float64, y int32) float64 {
	slot := row[lo : lo+len(c)]
	copy(slot, chat)
	hb := head.Loss(w0, row, y)
	copy(slot, c)
	return hb
}

// Reply is Answer over a batch: for each sample ids[j] (label y[ids[j]],
// table row table[id*width:(id+1)*width]) with outputs c and chat of k
// values a sample (k = len(c)/len(ids)) it writes h[j] and hb[j], and leaves
// the fresh c in the table. lo is the party's slot, (m-1)*k.
func Reply(head model.Head, w0, table []float64, width, lo int, ids []uint32, c, chat []float64, y []int32, h, hb []float64) {
	k := checkBatch(ids, c, chat, h, hb)
	for j, id := range ids {
		i := int(id)
		h[j], hb[j] = Answer(head, w0, table[i*width:(i+1)*width], lo, c[j*k:(j+1)*k], chat[j*k:(j+1)*k], y[i])
	}
}

// Store writes the fresh outputs c of a batch into the party's slot lo of
// the table (SynREVEL stores every party's before computing any loss).
func Store(table []float64, width, lo int, ids []uint32, c []float64) {
	k := checkBatch(ids, c, c, nil, nil)
	for j, id := range ids {
		i := int(id) * width
		copy(table[i+lo:i+lo+k], c[j*k:(j+1)*k])
	}
}

// Losses writes h[j] = F_0(w0, row of ids[j]) for a batch.
func Losses(head model.Head, w0, table []float64, width int, ids []uint32, y []int32, h []float64) {
	if len(h) != len(ids) {
		panic(fmt.Sprintf("kernel: Losses of %d samples into %d", len(ids), len(h)))
	}
	for j, id := range ids {
		i := int(id)
		h[j] = head.Loss(w0, table[i*width:(i+1)*width], y[i])
	}
}

// A Tap sees, and may replace, each sample's term of the head's two-point
// difference: i is the sample, b the batch size, v the term
// F_0(w0 + mu u0, row) - h. The aggregator's defenses clip and account the
// terms through one; nil is the identity.
type Tap interface {
	Term(i, b int, v float64) float64
}

// HeadDiff is the head's two-point difference on a batch,
// mean_j(F_0(w0p, row of ids[j]) - h[j]), each term through tap (if not
// nil), where w0p = w0 + mu u0 (Direction) and h[j] are the losses at w0
// (from Reply or Losses).
func HeadDiff(head model.Head, w0p, table []float64, width int, ids []uint32, y []int32, h []float64, tap Tap) float64 {
	if len(h) < len(ids) || len(ids) == 0 {
		panic(fmt.Sprintf("kernel: HeadDiff of %d samples with %d losses", len(ids), len(h)))
	}
	b := len(ids)
	var d float64
	for j, id := range ids {
		i := int(id)
		v := head.Loss(w0p, table[i*width:(i+1)*width], y[i]) - h[j]
		if tap != nil {
			v = tap.Term(i, b, v)
		}
		d += v
	}
	return d / float64(b)
}

// checkBatch checks the lengths of a batch's outputs and losses and returns
// k, the outputs per sample.
func checkBatch(ids []uint32, c, chat, h, hb []float64) int {
	b := len(ids)
	if b == 0 || len(c)%b != 0 || len(chat) != len(c) || (h != nil && len(h) < b) || (hb != nil && len(hb) < b) {
		panic(fmt.Sprintf("kernel: batch of %d samples with %d, %d outputs and %d, %d losses", b, len(c), len(chat), len(h), len(hb)))
	}
	return len(c) / b
}
