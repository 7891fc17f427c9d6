package observe_test

import (
	"os"
	"testing"

	"github.com/asyrevel/asyrevel/internal/memwatch"
)

func TestMain(m *testing.M) {
	memwatch.Start() // a runaway fails at once with its stacks
	os.Exit(m.Run())
}
