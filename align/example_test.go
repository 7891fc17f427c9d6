package align_test

import (
	"fmt"

	"github.com/asyrevel/asyrevel/align"
)

func ExampleNormalization_Key() {
	n := align.Normalization{StripZeros: true}
	a, _ := n.Key([]string{"  ACME  Corp ", "0042"})
	b, _ := n.Key([]string{"acme corp", "42"})
	fmt.Println(a == b, align.IDText(a))
	// Output: true acme%20corp%1F42
}

func ExampleOrderDigest() {
	a := align.OrderDigest([]string{"c1", "c2"})
	b := align.OrderDigest([]string{"c2", "c1"})
	fmt.Println(a == b, len(a))
	// Output: false 64
}
