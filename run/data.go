package run

import (
	"fmt"
	"math"
	"strconv"

	"github.com/asyrevel/asyrevel/dataset"
)

// scaleSpread is the ratio of the largest to the smallest column range
// above which a warning says the columns need scaling.
const scaleSpread = 1000

// finishData scales the columns that role holds, as cfg.Scale asks
// (fitted on the training rows, applied to both sets: each column belongs
// to one party, so a party scales its own alone and the result is the
// same), or warns when they are on very different scales.
func finishData(cfg *Config, d *Data, role int) error {
	if err := holdOut(cfg, d); err != nil {
		return err
	}
	for m := range d.PartTrain {
		x := d.PartTrain[m]
		if x == nil || cfg.Scale == dataset.ScaleNone {
			continue
		}
		s := dataset.NewScaler(cfg.Scale)
		if err := s.Fit(x); err != nil {
			return err
		}
		if dense := s.Dense(); len(dense) > 0 {
			if before, after := int64(x.NNZ()), s.Entries(x); after > 2*before {
				d.Warnings = append(d.Warnings, fmt.Sprintf("%s scaling of party %d's columns shifts %d of %d, so their zeros become non-zeros: %d stored entries instead of %d (--scale std or maxabs keep sparse data sparse)",
					cfg.Scale, m+1, len(dense), x.NCols, after, before))
			}
		}
		if d.Scalers == nil {
			d.Scalers = make([]*dataset.Scaler, len(d.PartTrain))
		}
		d.Scalers[m] = s
		var err error
		if d.PartTrain[m], err = s.Apply(x); err != nil {
			return err
		}
		if d.PartTest[m] != nil {
			if d.PartTest[m], err = s.Apply(d.PartTest[m]); err != nil {
				return err
			}
		}
	}
	if cfg.Scale == dataset.ScaleNone {
		if w := spreadWarning(d); w != "" {
			d.Warnings = append(d.Warnings, w)
			d.Unscaled = true
		}
	}
	for _, w := range d.Warnings {
		cfg.Log.Warn().Msg(w)
	}
	return nil
}

// spreadWarning says when the columns held differ in range by orders of
// magnitude: one step size is then too large for some and too small for
// others, and a zeroth-order step perturbs all of them by the same mu.
func spreadWarning(d *Data) string {
	type col struct {
		j   int
		max float64
	}
	var lo, hi col
	lo.max = math.Inf(1)
	for m, x := range d.PartTrain {
		if x == nil {
			continue
		}
		top := make([]float64, x.NCols)
		for k, j := range x.Indices {
			if v := math.Abs(float64(x.Values[k])); v > top[j] {
				top[j] = v
			}
		}
		for j, v := range top {
			g := d.Blocks[m].Lo + j
			if v > hi.max {
				hi = col{g, v}
			}
			if v > 0 && v < lo.max {
				lo = col{g, v}
			}
		}
	}
	if hi.max == 0 || math.IsInf(lo.max, 1) || hi.max < scaleSpread*lo.max {
		return ""
	}
	return fmt.Sprintf("the columns are on very different scales: %s reaches %.3g, %s only %.3g: one step size cannot fit both (and the perturbations of size mu are the same for all): give --scale standard (fitted on the training set only)",
		d.colName(hi.j), hi.max, d.colName(lo.j), lo.max)
}

func (d *Data) colName(j int) string {
	if j < len(d.Names) && d.Names[j] != "" {
		return strconv.Quote(d.Names[j])
	}
	return "column " + strconv.Itoa(j)
}
