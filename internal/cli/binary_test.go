package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/internal/memwatch"
)

// built is a binary built once for the package's tests.
type built struct {
	once sync.Once
	pkg  string // the main package
	path string
	err  error
	out  []byte
}

var (
	bin = &built{pkg: "github.com/asyrevel/asyrevel/cmd/asyrevel"}
	lab = &built{pkg: "github.com/asyrevel/asyrevel/cmd/asyrevel-lab"}
	tmp string // the folder of the binaries
)

// build builds b into the test's temporary folder, once.
func (b *built) build() (string, error) {
	b.once.Do(func() {
		b.path = filepath.Join(tmp, filepath.Base(b.pkg))
		b.out, b.err = exec.Command("go", "build", "-o", b.path, b.pkg).CombinedOutput()
		if b.err != nil {
			b.err = &buildError{b.pkg, b.err, b.out}
		}
	})
	return b.path, b.err
}

type buildError struct {
	pkg string
	err error
	out []byte
}

func (e *buildError) Error() string {
	return "go build " + e.pkg + ": " + e.err.Error() + "\n" + string(e.out)
}

// TestMain hands "experiment ..." over to an asyrevel-lab built from this
// tree (the tests call execute in this process, whose own folder holds no
// asyrevel-lab), and removes the binaries it built.
func TestMain(m *testing.M) {
	memwatch.Start() // a runaway fails at once with its stacks
	var err error
	if tmp, err = os.MkdirTemp("", "asyrevel-cli-test-"); err != nil {
		panic(err)
	}
	findLab = lab.build
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

// patience bounds a wait for something that must happen (a process that
// stops at once with its reason, a port that opens, a count that is
// reached): long, because it is no measure of promptness; a busy machine
// (CI shares two cores) must never reach it. It only keeps a defect that
// hangs from running into the suite's -timeout, and its expiry is a
// failure that names what did not happen.
const patience = 3 * time.Minute

// testBinary builds the asyrevel binary once for the tests that run it
// as separate processes.
func testBinary(t *testing.T) string {
	t.Helper()
	p, err := bin.build()
	if err != nil {
		t.Skipf("cannot build the binary: %v", err)
	}
	return p
}
