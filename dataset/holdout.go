package dataset

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
)

// TestSplit says how a single file is split into a training and a test
// set. The split is deterministic: the same file and TestSplit give the
// same sets on every machine and Go version.
type TestSplit struct {
	// Fraction is the share of the rows that go to the test set, in
	// [0, 1): round(Fraction * rows) rows, halves rounded up.
	Fraction float64

	// Shuffle chooses the test rows at random (with Seed). Without it the
	// test set is the first rows of the file and the training set the
	// rest, as the first fold of an unshuffled k-fold split (k = 5 for
	// Fraction 0.2) has it.
	Shuffle bool

	// Seed seeds the choice of the test rows when Shuffle is set: a
	// Fisher-Yates shuffle of the row positions driven by a PCG-DXSM
	// generator (math/rand/v2.PCG, seeded with Seed and a fixed stream)
	// with Lemire's unbiased bounded integers; the first round(Fraction *
	// rows) positions of the permutation are the test rows.
	Seed uint64
}

// splitStream is the second PCG seed word of TestSplit shuffles.
const splitStream = 0x7e575e70fda7a

// String describes s, as PRESETS.md does.
func (s TestSplit) String() string {
	if s.Shuffle {
		return fmt.Sprintf("test = %g of the rows, chosen at random (seed %d)", s.Fraction, s.Seed)
	}
	return fmt.Sprintf("test = the first %g of the rows, train = the rest, in file order", s.Fraction)
}

// rows splits the positions 0..n-1 into training and test positions, each
// in increasing order.
func (s TestSplit) rows(n int) (train, test []int, err error) {
	if !(s.Fraction >= 0 && s.Fraction < 1) {
		return nil, nil, fmt.Errorf("dataset: test fraction %v is not in [0, 1)", s.Fraction)
	}
	nTest := int(math.Round(s.Fraction * float64(n)))
	isTest := make([]bool, n)
	if s.Shuffle {
		perm := allRows(n)
		r := rand.NewPCG(s.Seed, splitStream)
		for i := n - 1; i > 0; i-- {
			j := boundedInt(r, uint64(i+1))
			perm[i], perm[j] = perm[j], perm[i]
		}
		for _, i := range perm[:nTest] {
			isTest[i] = true
		}
	} else {
		for i := range nTest {
			isTest[i] = true
		}
	}
	train, test = make([]int, 0, n-nTest), make([]int, 0, nTest)
	for i, t := range isTest {
		if t {
			test = append(test, i)
		} else {
			train = append(train, i)
		}
	}
	return train, test, nil
}

// boundedInt returns a uniform integer in [0, n) (Lemire's multiply and
// reject), fixed here so that splits never depend on the standard
// library's choice of algorithm.
func boundedInt(r *rand.PCG, n uint64) int {
	hi, lo := bits.Mul64(r.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(r.Uint64(), n)
		}
	}
	return int(hi)
}

// TrainTestSplit splits d into a training and a test set as s says; both
// keep d's columns, classes and encoding, and each sample keeps its ID
// (Dataset.ID), so the sets say which rows of d they hold.
func TrainTestSplit(d *Dataset, s TestSplit) (train, test *Dataset, err error) {
	tr, te, err := s.rows(d.Len())
	if err != nil {
		return nil, nil, err
	}
	train, test = d.Subset(tr), d.Subset(te)
	test.Name = d.Name + "/test"
	return train, test, nil
}
