package zoo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"gonum.org/v1/gonum/floats"
)

// Dist is the distribution of the random directions u.
type Dist int

const (
	// Gaussian directions u ~ N(0, I), written "gau".
	Gaussian Dist = iota
	// Sphere directions, uniform on the unit sphere ||u|| = 1, written "uni".
	Sphere
)

// ParseDist parses a direction distribution: "gau" or "gaussian" for
// Gaussian, "uni" or "sphere" for Sphere (case-insensitive).
func ParseDist(s string) (Dist, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "gau", "gaussian":
		return Gaussian, nil
	case "uni", "sphere":
		return Sphere, nil
	}
	return 0, fmt.Errorf("zoo: unknown direction distribution %q (want gau, gaussian, uni or sphere)", s)
}

// String returns the short name used in algorithm names: "gau" or "uni".
func (d Dist) String() string {
	switch d {
	case Gaussian:
		return "gau"
	case Sphere:
		return "uni"
	}
	return fmt.Sprintf("Dist(%d)", int(d))
}

// MarshalText implements encoding.TextMarshaler with the short name.
func (d Dist) MarshalText() ([]byte, error) {
	if d != Gaussian && d != Sphere {
		return nil, fmt.Errorf("zoo: invalid Dist(%d)", int(d))
	}
	return []byte(d.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseDist, so a
// Dist can be a flag (flag.TextVar) or a JSON string.
func (d *Dist) UnmarshalText(b []byte) error {
	v, err := ParseDist(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Draw fills u with a direction drawn from d using rng. It does not
// allocate. Draw panics if d is not a valid Dist, or if d is Sphere and u is
// empty.
func (d Dist) Draw(rng *rand.Rand, u []float64) {
	switch d {
	case Gaussian:
		for i := range u {
			u[i] = rng.NormFloat64()
		}
	case Sphere:
		if len(u) == 0 {
			panic("zoo: Sphere direction of dimension 0")
		}
		for {
			var ss float64
			for i := range u {
				v := rng.NormFloat64()
				u[i] = v
				ss += v * v
			}
			if ss > 0 && !math.IsInf(ss, 0) {
				floats.Scale(1/math.Sqrt(ss), u)
				return
			}
		}
	default:
		panic(fmt.Sprintf("zoo: invalid Dist(%d)", int(d)))
	}
}

// Phi is the scaling that makes (phi/mu) (f(w+mu u) - f(w)) u an unbiased
// estimate of the gradient of the mu-smoothed f in dimension dim: 1 for
// Gaussian and dim for Sphere. See the package documentation for why this
// differs from the paper's d/mu. Phi panics if dim < 1 or d is invalid.
func (d Dist) Phi(dim int) float64 {
	if dim < 1 {
		panic(fmt.Sprintf("zoo: Phi of dimension %d", dim))
	}
	switch d {
	case Gaussian:
		return 1
	case Sphere:
		return float64(dim)
	}
	panic(fmt.Sprintf("zoo: invalid Dist(%d)", int(d)))
}
