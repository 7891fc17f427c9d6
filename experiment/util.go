package experiment

import (
	"math"
	"strconv"
)

var (
	nanF = math.NaN()
	inf  = math.Inf(1)
)

func fmtF(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
