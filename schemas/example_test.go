package schemas_test

import (
	"fmt"
	"math"

	"github.com/asyrevel/asyrevel/schemas"
)

func Example() {
	c := schemas.NewCodec()
	out := &schemas.PartyOutput{
		Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: 1},
		IDs:    []uint32{17},
		C:      []float64{0.25},
		CHat:   []float64{0.2513},
	}
	data, _ := c.Marshal(out)
	subject := schemas.Subject("demo", out.Kind(), 2)

	// The receiver learns the party from the subject and checks it.
	_, party, _ := schemas.ParseSubject("demo", subject)
	var got schemas.PartyOutput
	if err := c.Unmarshal(data, &got); err != nil {
		fmt.Println(err)
	}
	err := got.Validate(schemas.Limits{Party: party, K: 1, NTrain: 100})
	fmt.Println(subject, len(data), "bytes", got.C[0], err)

	got.C[0] = math.NaN()
	err = got.Validate(schemas.Limits{Party: party, K: 1, NTrain: 100})
	fmt.Println(schemas.Reason(err))
	// Output:
	// asyrevel.demo.out.2 22 bytes 0.25 <nil>
	// nonfinite
}
