package model_test

import (
	"fmt"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/model"
)

// Example evaluates two linear parties and the logistic head on one sample,
// as the aggregator combines the parties' outputs.
func Example() {
	// Party 1 holds features (x0, x1), party 2 holds (x2, x3), of 2 samples.
	x1 := &dataset.Matrix{NRows: 2, NCols: 2, Indptr: []int64{0, 2, 3},
		Indices: []int32{0, 1, 1}, Values: []float32{1, 2, 1}}
	x2 := &dataset.Matrix{NRows: 2, NCols: 2, Indptr: []int64{0, 1, 1},
		Indices: []int32{0}, Values: []float32{3}}
	p1, p2 := model.NewLinear(2, 1), model.NewLinear(2, 1)
	w1 := []float64{0.5, -0.25}
	w2 := []float64{0.1, 0.2}

	rows := []uint32{0, 1}
	c1 := make([]float64, len(rows))
	c2 := make([]float64, len(rows))
	p1.Forward(w1, x1, rows, c1)
	p2.Forward(w2, x2, rows, c2)

	head := model.NewLogistic(2)
	reg := model.Nonconvex{}
	labels := []int32{1, 0}
	for i := range rows {
		c := []float64{c1[i], c2[i]}
		fmt.Printf("sample %d: c = %.2f, loss %.4f, predict %d (label %d)\n",
			i, c, head.Loss(nil, c, labels[i]), head.Predict(nil, c), labels[i])
	}
	fmt.Printf("g(w1) = %.4f\n", reg.Value(w1))
	// Output:
	// sample 0: c = [0.00 0.30], loss 0.5544, predict 1 (label 1)
	// sample 1: c = [-0.25 0.00], loss 0.5759, predict 0 (label 0)
	// g(w1) = 0.1294
}
