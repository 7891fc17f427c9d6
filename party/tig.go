package party

import (
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
)

// The first-order baseline, TIG (transmit intermediate gradients, i.e. split
// learning): the party sends its outputs c for a batch, the aggregator
// replies dF_0/dc for the party's slot, and the party back-propagates it
// through its white-box model:
//
//	w <- w - eta [ (1/B) sum_i J_w F(w; x_i)^T dF_0/dc_i + lambda grad g(w) ].
//
// With a window above 1 the backward pass runs at the party's current
// parameters, which may have moved since c was computed (for a linear model
// the Jacobian does not depend on w).

// prepareGrad draws a batch into the next free slot and evaluates the model
// at w into p.out (no c_hat). It does not allocate.
func (p *Party) prepareGrad() *pending {
	slot := &p.ring[(p.head+p.n)%len(p.ring)]
	p.drawBatch(slot)
	p.out.C = p.out.C[:len(slot.ids)*p.k]
	p.cfg.Model.Forward(p.w, p.cfg.Train, slot.ids, p.out.C)
	p.out.IDs = slot.ids
	return slot
}

// applyGrad is apply for TIG: validate the gradient reply to slot, then
// take the first-order step.
func (p *Party) applyGrad(slot *pending, r *schemas.Reply) error {
	b := len(slot.ids)
	if err := r.Validate(schemas.Limits{Party: p.cfg.ID, K: p.k, Batch: b, FirstOrder: true, MaxAbs: p.cfg.ReplyBound}); err != nil {
		return err
	}
	a := &p.alt
	inv := 1 / float64(b)
	for i, g := range r.Grad {
		a.dout[i] = g * inv
	}
	clear(a.grad)
	a.wb.Backward(p.w, p.cfg.Train, slot.ids, a.dout[:len(r.Grad)], a.grad)
	if p.cfg.Reg != nil && p.cfg.Lambda != 0 {
		clear(a.regG)
		p.cfg.Reg.Grad(p.w, a.regG)
		zoo.AddScaled(a.grad, p.cfg.Lambda, a.regG)
	}
	zoo.AddScaled(p.w, -p.cfg.LR.At(p.t), a.grad)
	p.advance()
	return nil
}
