package model

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func benchForward(b *testing.B, m Local, density float64, batch int) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := randomMatrix(rng, 256, m.InDim(), density, true)
	w := make([]float64, m.NumParams())
	m.Init(w, rng)
	rows := make([]uint32, batch)
	for i := range rows {
		rows[i] = uint32(rng.IntN(x.NRows))
	}
	out := make([]float64, batch*m.OutDim())
	b.ReportAllocs()
	for b.Loop() {
		m.Forward(w, x, rows, out)
	}
}

// BenchmarkLinearForward: d = 16 with about 2 non-zeros a row (a9a over 8
// parties).
func BenchmarkLinearForward(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("d=16/batch=%d", batch), func(b *testing.B) {
			benchForward(b, NewLinear(16, 1), 0.12, batch)
		})
	}
}

// BenchmarkMLPForward: d = 98 (MNIST over 8 parties, about 19% non-zero),
// H = 128, k = 1.
func BenchmarkMLPForward(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("d=98/H=128/batch=%d", batch), func(b *testing.B) {
			benchForward(b, NewMLP(98, DefaultHidden, 1), 0.19, batch)
		})
	}
}

func BenchmarkMLPBackward(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	m := NewMLP(98, DefaultHidden, 1)
	x := randomMatrix(rng, 256, 98, 0.19, true)
	w := make([]float64, m.NumParams())
	m.Init(w, rng)
	grad := make([]float64, m.NumParams())
	rows := []uint32{5}
	dout := []float64{0.3}
	b.ReportAllocs()
	for b.Loop() {
		m.Backward(w, x, rows, dout, grad)
	}
}

func benchHead(b *testing.B, h Head) {
	rng := rand.New(rand.NewPCG(1, 2))
	w0 := make([]float64, h.NumParams())
	h.Init(w0, rng)
	if len(w0) == 0 {
		w0 = nil
	}
	c := randVec(rng, h.InDim(), 1)
	b.ReportAllocs()
	for b.Loop() {
		h.Loss(w0, c, 1)
	}
}

func BenchmarkLogisticLoss(b *testing.B) { benchHead(b, NewLogistic(8)) }

// BenchmarkSoftmaxLoss: q = 8 parties with k = 1, 10 classes (the paper's NN).
func BenchmarkSoftmaxLoss(b *testing.B) { benchHead(b, NewSoftmax(8, 10)) }
