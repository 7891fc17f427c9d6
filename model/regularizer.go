package model

import (
	"fmt"
	"strings"
)

// Nonconvex is the paper's nonconvex regulariser
// g(w) = 1/2 sum_j w_j^2 / (1 + w_j^2), with dg/dw_j = w_j / (1 + w_j^2)^2.
type Nonconvex struct{}

// Value is 1/2 sum w_j^2/(1+w_j^2).
func (Nonconvex) Value(w []float64) float64 {
	var s float64
	for _, v := range w {
		v2 := v * v
		s += v2 / (1 + v2)
	}
	return s / 2
}

// Grad adds w_j/(1+w_j^2)^2 to g[j].
func (Nonconvex) Grad(w, g []float64) {
	checkLen("Nonconvex.Grad", "g", len(g), len(w))
	g = g[:len(w)]
	for j, v := range w {
		a := 1 + v*v
		g[j] += v / (a * a)
	}
}

// String is "nonconvex".
func (Nonconvex) String() string { return "nonconvex" }

// L2 is g(w) = 1/2 sum_j w_j^2.
type L2 struct{}

// Value is 1/2 sum w_j^2.
func (L2) Value(w []float64) float64 {
	var s float64
	for _, v := range w {
		s += v * v
	}
	return s / 2
}

// Grad adds w to g.
func (L2) Grad(w, g []float64) {
	checkLen("L2.Grad", "g", len(g), len(w))
	g = g[:len(w)]
	for j, v := range w {
		g[j] += v
	}
}

// String is "l2".
func (L2) String() string { return "l2" }

// None is g(w) = 0.
type None struct{}

// Value is 0.
func (None) Value(w []float64) float64 { return 0 }

// Grad adds nothing.
func (None) Grad(w, g []float64) { checkLen("None.Grad", "g", len(g), len(w)) }

// String is "none".
func (None) String() string { return "none" }

// ParseRegularizer returns the regulariser named "nonconvex", "l2" or
// "none" (case-insensitive).
func ParseRegularizer(name string) (Regularizer, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "nonconvex":
		return Nonconvex{}, nil
	case "l2":
		return L2{}, nil
	case "none":
		return None{}, nil
	}
	return nil, fmt.Errorf("model: unknown regularizer %q (want nonconvex, l2 or none)", name)
}
