package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrStoreInUse reports a store directory that another live process holds.
var ErrStoreInUse = errors.New("broker: store directory in use")

// StoreLockFile is the lock file an embedded server keeps in its store
// directory while it runs. Its content is the holder's process id.
const StoreLockFile = "asyrevel.lock"

// LockStore takes the store directory dir for an embedded server: an
// exclusive advisory lock (flock) on dir/asyrevel.lock, created if needed
// and given the holder's process id. nats-server itself does not lock its
// store, and two servers on one store corrupt it. It fails with
// ErrStoreInUse, naming the holder, if another process holds the lock.
//
// With shared set (a reader of a stopped run's store), it writes nothing:
// it takes a shared lock on the lock file if the file exists (so that no
// run starts on the store meanwhile) and fails if a writer holds it; if
// the file does not exist there is nothing to lock. release drops the lock.
func LockStore(dir string, shared bool) (release func() error, err error) {
	path := filepath.Join(dir, StoreLockFile)
	var f *os.File
	if shared {
		f, err = os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			return func() error { return nil }, nil
		}
	} else {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("broker: store directory: %w", err)
		}
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	}
	if err != nil {
		return nil, fmt.Errorf("broker: store lock: %w", err)
	}
	if err := flock(f, !shared); err != nil {
		f.Close()
		return nil, storeInUse(dir, path, err)
	}
	if !shared {
		_ = f.Truncate(0)
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() error {
		funlock(f)
		return f.Close()
	}, nil
}

func storeInUse(dir, path string, err error) error {
	holder := "another process"
	if b, rerr := os.ReadFile(path); rerr == nil {
		if pid := strings.TrimSpace(string(b)); pid != "" {
			holder = "process " + pid
		}
	}
	return fmt.Errorf("%w: %s is held by %s (a live broker or run); stop it first, or read the run through that broker with --nats URL (%v)",
		ErrStoreInUse, dir, holder, err)
}
