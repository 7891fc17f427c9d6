package party

import (
	"reflect"
	"testing"
)

// The roles stay small: what a part of the party keeps goes into a
// struct of its own (state.go), not into Party.
func TestPartyFields(t *testing.T) {
	const most = 40
	if n := reflect.TypeFor[Party]().NumField(); n > most {
		t.Errorf("Party has %d fields, at most %d: group the new ones with the part that keeps them", n, most)
	}
}
