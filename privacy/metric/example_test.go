package metric_test

import (
	"fmt"

	"github.com/asyrevel/asyrevel/privacy/metric"
)

func ExampleAUC() {
	scores := []float64{0.9, 0.8, 0.3, 0.1}
	positive := []bool{true, false, true, false}
	fmt.Println(metric.AUC(scores, positive))
	// Output: 0.75
}
