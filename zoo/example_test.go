package zoo_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/asyrevel/asyrevel/zoo"
)

// Example minimises f(w) = |w - 1|^2 / 2 using only function values: one
// direction and two evaluations per step, as an AsyREVEL party does.
func Example() {
	f := func(w []float64) float64 {
		var s float64
		for _, x := range w {
			s += (x - 1) * (x - 1) / 2
		}
		return s
	}
	const (
		d  = 4
		mu = 1e-3
	)
	dist, err := zoo.ParseDist("uni")
	if err != nil {
		panic(err)
	}
	phi := dist.Phi(d)
	eta := zoo.Schedule{Eta0: 0.1, T0: 1000}
	rng := rand.New(rand.NewPCG(1, 2))

	w := make([]float64, d)
	u := make([]float64, d)
	wp := make([]float64, d)
	fmt.Printf("f before: %.2f\n", f(w))
	for t := range 2000 {
		dist.Draw(rng, u)
		zoo.Perturb(wp, w, u, mu)
		diff := f(wp) - f(w)
		zoo.AddScaled(w, -eta.At(t)*zoo.Coef(diff, mu, phi), u)
	}
	fmt.Printf("f after:  %.2f\n", f(w))
	fmt.Println("phi:", zoo.Gaussian.Phi(d), zoo.Sphere.Phi(d))
	// Output:
	// f before: 2.00
	// f after:  0.00
	// phi: 1 4
}
