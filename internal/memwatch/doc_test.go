package memwatch_test

import (
	"fmt"

	"github.com/asyrevel/asyrevel/internal/memwatch"
)

func ExampleCeiling() {
	c, err := memwatch.Ceiling("512MiB")
	fmt.Println(c, err)
	// Output: 536870912 <nil>
}
