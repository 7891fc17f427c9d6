package dp

import "math"

// GaussianRho is the zCDP parameter of a Gaussian mechanism with L2
// sensitivity sens and noise standard deviation sigma: sens^2/(2 sigma^2).
// It is +Inf without noise.
func GaussianRho(sens, sigma float64) float64 {
	if sigma <= 0 {
		if sens == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return sens * sens / (2 * sigma * sigma)
}

// Mu is the Gaussian DP parameter of a composition of Gaussian mechanisms
// with total zCDP rho: sqrt(2 rho).
func Mu(rho float64) float64 { return math.Sqrt(2 * rho) }

// normCDF is the standard normal distribution function.
func normCDF(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }

// GaussianDelta is the smallest delta for which a mu-GDP mechanism is
// (eps, delta)-DP: Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)
// (Balle and Wang 2018, Theorem 8).
func GaussianDelta(mu, eps float64) float64 {
	if mu <= 0 {
		return 0
	}
	if math.IsInf(mu, 1) {
		return 1
	}
	d := normCDF(-eps/mu+mu/2) - math.Exp(eps)*normCDF(-eps/mu-mu/2)
	return max(d, 0)
}

// Epsilon is the smallest epsilon for which a composition of Gaussian
// mechanisms with total zCDP rho is (epsilon, delta)-DP: the exact curve of
// the equivalent sqrt(2 rho)-GDP mechanism, inverted by bisection. It is
// 0 for rho = 0 and +Inf for rho = +Inf or delta <= 0.
func Epsilon(rho, delta float64) float64 {
	if rho <= 0 {
		return 0
	}
	if math.IsInf(rho, 1) || delta <= 0 || math.IsNaN(rho) {
		return math.Inf(1)
	}
	if delta >= 1 {
		return 0
	}
	mu := Mu(rho)
	if GaussianDelta(mu, 0) <= delta {
		return 0
	}
	lo, hi := 0.0, 1.0
	for GaussianDelta(mu, hi) > delta {
		lo, hi = hi, 2*hi
		if hi > 1e6 {
			return math.Inf(1)
		}
	}
	for range 200 {
		mid := (lo + hi) / 2
		if GaussianDelta(mu, mid) > delta {
			lo = mid
		} else {
			hi = mid
		}
		if hi-lo < 1e-12*max(1, hi) {
			break
		}
	}
	return hi
}

// EpsilonZCDP is the classic conversion of rho-zCDP to (epsilon, delta):
// rho + 2 sqrt(rho ln(1/delta)) (Bun and Steinke 2016, Proposition 1.3).
// It holds for any rho-zCDP mechanism and is looser than Epsilon.
func EpsilonZCDP(rho, delta float64) float64 {
	if rho <= 0 {
		return 0
	}
	if delta <= 0 || math.IsInf(rho, 1) {
		return math.Inf(1)
	}
	return rho + 2*math.Sqrt(rho*math.Log(1/delta))
}

// AUCBoundGaussian is the largest ROC AUC that any test can reach
// between the two values of one label protected by a mu-GDP mechanism:
// the area under the Gaussian trade-off curve, Phi(mu/sqrt 2).
func AUCBoundGaussian(mu float64) float64 {
	if math.IsInf(mu, 1) {
		return 1
	}
	return normCDF(mu / math.Sqrt2)
}

// AUCBoundPure is the largest ROC AUC against an eps-DP mechanism (for
// instance binary randomised response with this eps): e^eps/(1+e^eps).
func AUCBoundPure(eps float64) float64 {
	if math.IsInf(eps, 1) {
		return 1
	}
	return 1 / (1 + math.Exp(-eps))
}

// MuForAUC is the mu of the Gaussian mechanism whose AUC bound is auc:
// the largest mu with AUCBoundGaussian(mu) <= auc.
func MuForAUC(auc float64) float64 {
	if auc <= 0.5 {
		return 0
	}
	if auc >= 1 {
		return math.Inf(1)
	}
	lo, hi := 0.0, 1.0
	for AUCBoundGaussian(hi) < auc {
		hi *= 2
	}
	for range 100 {
		mid := (lo + hi) / 2
		if AUCBoundGaussian(mid) < auc {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// KeepProb is the probability that randomised response with eps over
// classes classes reports the true label: e^eps/(e^eps + classes - 1).
// Any other class is reported with probability 1/(e^eps + classes - 1).
// This is eps-label-DP.
func KeepProb(eps float64, classes int) float64 {
	if math.IsInf(eps, 1) {
		return 1
	}
	e := math.Exp(eps)
	return e / (e + float64(classes-1))
}

// RhoForEpsilon is the largest total zCDP rho of a composition of
// Gaussian mechanisms that is still (eps, delta)-DP (the inverse of
// Epsilon).
func RhoForEpsilon(eps, delta float64) float64 {
	if eps <= 0 || delta <= 0 {
		return 0
	}
	if delta >= 1 || math.IsInf(eps, 1) {
		return math.Inf(1)
	}
	lo, hi := 0.0, 1.0
	for Epsilon(hi, delta) < eps {
		lo, hi = hi, 2*hi
	}
	for range 100 {
		mid := (lo + hi) / 2
		if Epsilon(mid, delta) <= eps {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
