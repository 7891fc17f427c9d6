package schemas

import (
	"math/bits"
	"math/rand/v2"
)

// DrawBatch fills dst with the sample ids of request r (r = 0, 1, ...) of
// party m when the aggregator draws the batches (Control.BatchSeed): ids
// uniform in [0, n), drawn with replacement, from a generator keyed by the
// seed, the party and r. The party computes them to know which samples to
// evaluate, the aggregator to check the request; neither can choose them.
// It does not allocate.
func DrawBatch(dst []uint32, seed uint64, m int, r uint64, n int) {
	var g rand.PCG
	g.Seed(seed^(uint64(m)*0x9e3779b97f4a7c15), r)
	un := uint64(n)
	for j := range dst {
		// Lemire's multiply-and-reject: exactly uniform in [0, n).
		hi, lo := bits.Mul64(g.Uint64(), un)
		if lo < un {
			thresh := -un % un
			for lo < thresh {
				hi, lo = bits.Mul64(g.Uint64(), un)
			}
		}
		dst[j] = uint32(hi)
	}
}
