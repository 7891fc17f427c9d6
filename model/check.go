package model

import (
	"fmt"

	"github.com/asyrevel/asyrevel/dataset"
)

func checkDims(who string, vals ...int) {
	for _, v := range vals {
		if v <= 0 {
			panic(fmt.Sprintf("model: %s with non-positive dimension %v", who, vals))
		}
	}
}

func checkLen(who, what string, got, want int) {
	if got != want {
		panic(fmt.Sprintf("model: %s: len(%s) = %d, want %d", who, what, got, want))
	}
}

// checkForward checks the arguments shared by every Local's Forward and
// Backward.
func checkForward(who string, d, k, np int, w []float64, x *dataset.Matrix, rows []uint32, out []float64) {
	checkLen(who, "w", len(w), np)
	if x.NCols != d {
		panic(fmt.Sprintf("model: %s: matrix has %d columns, model has %d inputs", who, x.NCols, d))
	}
	checkLen(who, "out", len(out), len(rows)*k)
}
