package dp_test

import (
	"fmt"

	"github.com/asyrevel/asyrevel/privacy/dp"
)

// A label visited 5 times by a batch-mean reply of 256 samples, clipped at
// C and noised with sigma = 8 x 2C/256: its privacy loss in zCDP, (epsilon,
// delta) and the best AUC any attacker can reach against it.
func Example() {
	const b, z = 256, 8.0
	sens, sigma := 2.0/b, z*2.0/b // in units of C
	rho := 5 * dp.GaussianRho(sens, sigma)
	fmt.Printf("rho %.4f, epsilon %.2f at delta 1e-5, AUC at most %.3f\n", rho, dp.Epsilon(rho, 1e-5), dp.AUCBoundGaussian(dp.Mu(rho)))
	// Output: rho 0.0391, epsilon 1.05 at delta 1e-5, AUC at most 0.578
}
