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

	// Stratify keeps each class's share in both sets (TrainTestSplit):
	// the test set takes round(Fraction * rows) rows in all, spread over
	// the classes in proportion to their sizes (largest remainders get the
	// rows left over, ties to the lower class), each class's test rows
	// chosen as Shuffle would choose them among the class's rows.
	// Requires Shuffle.
	Stratify bool
}

// splitStream is the second PCG seed word of TestSplit shuffles.
const splitStream = 0x7e575e70fda7a

// String describes s, as PRESETS.md does.
func (s TestSplit) String() string {
	if s.Stratify {
		return fmt.Sprintf("test = %g of the rows of each class, chosen at random (seed %d)", s.Fraction, s.Seed)
	}
	if s.Shuffle {
		return fmt.Sprintf("test = %g of the rows, chosen at random (seed %d)", s.Fraction, s.Seed)
	}
	return fmt.Sprintf("test = the first %g of the rows, train = the rest, in file order", s.Fraction)
}

// Rows splits the positions 0..n-1 into training and test positions, each
// in increasing order, as TrainTestSplit does without Stratify: a process
// that holds only some columns of a set (a party) and one that holds its
// labels get the same rows.
func (s TestSplit) Rows(n int) (train, test []int, err error) { return s.rows(n) }

// rows splits the positions 0..n-1 into training and test positions, each
// in increasing order.
func (s TestSplit) rows(n int) (train, test []int, err error) {
	if !(s.Fraction >= 0 && s.Fraction < 1) {
		return nil, nil, fmt.Errorf("dataset: test fraction %v is not in [0, 1)", s.Fraction)
	}
	nTest := int(math.Round(s.Fraction * float64(n)))
	isTest := make([]bool, n)
	if s.Shuffle {
		for _, i := range s.perm(n)[:nTest] {
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
	var tr, te []int
	if s.Stratify {
		tr, te, err = s.stratified(d.Y, d.Classes)
	} else {
		tr, te, err = s.rows(d.Len())
	}
	if err != nil {
		return nil, nil, err
	}
	train, test = d.Subset(tr), d.Subset(te)
	test.Name = d.Name + "/test"
	return train, test, nil
}

// stratified splits the positions of labels y (classes 0..classes-1) as
// TestSplit.Stratify says.
func (s TestSplit) stratified(y []int32, classes int) (train, test []int, err error) {
	if !s.Shuffle {
		return nil, nil, fmt.Errorf("dataset: a stratified split chooses rows at random: set Shuffle")
	}
	if !(s.Fraction >= 0 && s.Fraction < 1) {
		return nil, nil, fmt.Errorf("dataset: test fraction %v is not in [0, 1)", s.Fraction)
	}
	byClass := make([][]int, classes)
	for i, c := range y {
		byClass[c] = append(byClass[c], i)
	}
	// Largest remainder allocation of round(Fraction * n) test rows.
	n := len(y)
	want := int(math.Round(s.Fraction * float64(n)))
	take := make([]int, classes)
	rem := make([]float64, classes)
	got := 0
	for c, rows := range byClass {
		exact := s.Fraction * float64(len(rows))
		take[c] = int(math.Floor(exact))
		rem[c] = exact - float64(take[c])
		got += take[c]
	}
	for ; got < want; got++ {
		best := -1
		for c := range classes {
			if take[c] < len(byClass[c]) && (best < 0 || rem[c] > rem[best]) {
				best = c
			}
		}
		if best < 0 {
			break
		}
		take[best]++
		rem[best] = -1
	}
	isTest := make([]bool, n)
	for c, rows := range byClass {
		sub := TestSplit{Fraction: s.Fraction, Shuffle: true, Seed: s.Seed + uint64(c)}
		perm := sub.perm(len(rows))
		for _, k := range perm[:take[c]] {
			isTest[rows[k]] = true
		}
	}
	for i, t := range isTest {
		if t {
			test = append(test, i)
		} else {
			train = append(train, i)
		}
	}
	return train, test, nil
}

// perm is the Fisher-Yates permutation of 0..n-1 that rows uses.
func (s TestSplit) perm(n int) []int {
	perm := allRows(n)
	r := rand.NewPCG(s.Seed, splitStream)
	for i := n - 1; i > 0; i-- {
		j := boundedInt(r, uint64(i+1))
		perm[i], perm[j] = perm[j], perm[i]
	}
	return perm
}
