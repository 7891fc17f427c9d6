package aggregator

import (
	"reflect"
	"testing"
)

// The roles stay small: what a part of the aggregator keeps goes into a
// struct of its own (state.go) or a component, not into Aggregator.
func TestAggregatorFields(t *testing.T) {
	const most = 40
	if n := reflect.TypeFor[Aggregator]().NumField(); n > most {
		t.Errorf("Aggregator has %d fields, at most %d: group the new ones with the part that keeps them", n, most)
	}
}
