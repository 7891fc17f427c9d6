package experiment

import "math"

var (
	nanF = math.NaN()
	inf  = math.Inf(1)
)
