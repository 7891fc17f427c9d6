package aggregator

import (
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
)

// The first-order baseline, TIG (transmit intermediate gradients, i.e.
// split learning), through the same pipeline: a party sends its outputs c
// for a batch; the aggregator stores them (fresh, as in AsyREVEL), replies
// the gradient of its head's loss with respect to the party's slot,
// dF_0/dc_{i,m} (k values a sample), and takes a first-order step of its own
// head with the batch's mean gradient dF_0/dw_0. Unlike the zeroth-order
// algorithms, this puts gradients on the wire, and it needs white-box
// models on both sides.

// answerGrad runs the aggregator's part of one TIG step into a.rep. It does
// not allocate.
func (a *Aggregator) answerGrad(m int, o *schemas.PartyOutput) {
	s := &a.alt
	k, w := a.k, a.width
	y := a.labels
	slot := (m - 1) * k
	r := &a.rep
	r.Party, r.ReqSeq = uint16(m), o.Seq
	r.Cause = append(r.Cause[:0], a.wire.cause...)
	r.H, r.HBar, r.Delta, r.Grad = r.H[:0], r.HBar[:0], r.Delta[:0], r.Grad[:0]
	clear(s.g0)
	var stale uint32
	for j, id := range o.IDs {
		i := int(id)
		row := a.table[i*w : (i+1)*w]
		copy(row[slot:slot+k], o.C[j*k:(j+1)*k])
		stale = a.staleness(m, i, stale)
		clear(s.dc)
		s.head.Grad(a.w0, row, y[i], s.g0, s.dc)
		r.Grad = append(r.Grad, s.dc[slot:slot+k]...)
	}
	r.Staleness = stale
	a.version[m]++
	a.recordStaleness(m, stale)
	if len(a.w0) > 0 {
		eta := a.cfg.LR.At(int(a.res.Steps))
		zoo.AddScaled(a.w0, -eta/float64(len(o.IDs)), s.g0)
	}
}
