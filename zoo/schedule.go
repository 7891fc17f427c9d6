package zoo

import (
	"fmt"
	"math"
)

// Schedule is the step size eta_t = Eta0 / sqrt(1 + t/T0) at step t = 0, 1, ...
// T0 = 0 means the constant step Eta0 (the paper's setting).
type Schedule struct {
	Eta0 float64 // initial step size
	T0   float64 // decay time scale in steps; 0 for a constant step
}

// At is the step size at step t. It panics if t < 0 or T0 < 0.
func (s Schedule) At(t int) float64 {
	if t < 0 || s.T0 < 0 {
		panic(fmt.Sprintf("zoo: Schedule.At(%d) with T0 = %v", t, s.T0))
	}
	if s.T0 == 0 {
		return s.Eta0
	}
	return s.Eta0 / math.Sqrt(1+float64(t)/s.T0)
}

// String describes the schedule, e.g. "0.003/sqrt(1+t/100000)" or "0.001".
func (s Schedule) String() string {
	if s.T0 == 0 {
		return fmt.Sprintf("%g", s.Eta0)
	}
	return fmt.Sprintf("%g/sqrt(1+t/%g)", s.Eta0, s.T0)
}
