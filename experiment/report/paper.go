package report

import "math"

// The paper's own figures (Zhang, Gu, Dang, Deng and Huang, CIKM 2021), as
// this project's sources quote them: what the report sets ours beside.
// They are the paper's claims, not measurements of this project.

// Table4Algos are the methods of the paper's Table 4, in its order.
var Table4Algos = []string{"asyrevel-gau", "asyrevel-uni", "nonf"}

// PaperAccuracy is a set's row of the paper's Table 4: test accuracy of
// AsyREVEL-Gau, AsyREVEL-Uni and NonF, in the order of Table4Algos. NaN
// where the paper's figure is not known here.
type PaperAccuracy struct {
	Gau, Uni, NonF float64
	// AsyREVEL is the one AsyREVEL figure quoted for a set whose variant
	// (Gau or Uni) the sources do not give (NaN otherwise).
	AsyREVEL float64
}

// For is the paper's figure for algo (one of Table4Algos), NaN if none.
func (p PaperAccuracy) For(algo string) float64 {
	switch algo {
	case "asyrevel-gau":
		if !math.IsNaN(p.Gau) {
			return p.Gau
		}
		return p.AsyREVEL
	case "asyrevel-uni":
		if !math.IsNaN(p.Uni) {
			return p.Uni
		}
		return p.AsyREVEL
	case "nonf":
		return p.NonF
	}
	return math.NaN()
}

// PaperTable4 is the paper's Table 4 by set: D1 (UCI credit card), D2
// (GiveMeSomeCredit) and D4 (a9a) in full (Gau / Uni / NonF); for w8a,
// MNIST and Fashion-MNIST the one AsyREVEL figure this project's sources
// quote.
var PaperTable4 = map[string]PaperAccuracy{
	"uci-credit-card":     {Gau: 0.8193, Uni: 0.8188, NonF: 0.8193, AsyREVEL: math.NaN()},
	"give-me-some-credit": {Gau: 0.9350, Uni: 0.9348, NonF: 0.9350, AsyREVEL: math.NaN()},
	"a9a":                 {Gau: 0.8516, Uni: 0.8514, NonF: 0.8516, AsyREVEL: math.NaN()},
	"w8a":                 {Gau: math.NaN(), Uni: math.NaN(), NonF: math.NaN(), AsyREVEL: 0.8985},
	"mnist":               {Gau: math.NaN(), Uni: math.NaN(), NonF: math.NaN(), AsyREVEL: 0.9189},
	"fashion-mnist":       {Gau: math.NaN(), Uni: math.NaN(), NonF: math.NaN(), AsyREVEL: 0.8132},
}

// PaperFigure is the paper's Table 4 figure for set and algo (NaN if none).
func PaperFigure(set, algo string) float64 {
	if p, ok := PaperTable4[set]; ok {
		return p.For(algo)
	}
	return math.NaN()
}

// PaperNN are the paper's test accuracies for its neural network.
var PaperNN = map[string]float64{"mnist": 0.9189, "fashion-mnist": 0.8132}
