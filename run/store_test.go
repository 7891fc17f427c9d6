package run

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
)

// smallRun is the settings of the store tests' short runs (2 parties,
// one epoch of small synthetic data), with set's on top.
func smallRun(t *testing.T, set func(*Config)) Config {
	return New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 2
		c.Batch = 16
		c.Window = 2
		c.Epochs = 1
		c.Seed = 1
		set(c)
	})
}

// A store lists its runs and removes one or all; a folder that holds
// anything else is never removed.
func TestStore(t *testing.T) {
	store := t.TempDir()
	for _, id := range []string{"one", "two"} {
		s, err := Train(context.Background(), smallRun(t, func(c *Config) {
			c.StoreDir = store
			c.Run = id
		}), Hooks{Log: testLog(t)})
		if err != nil {
			t.Fatal(err)
		}
		if s.Store != store || s.StoreBytes <= 0 || s.StreamBytes == 0 || uint64(s.StoreBytes) < s.StreamBytes {
			t.Fatalf("summary: store %q of %d bytes, stream of %d bytes", s.Store, s.StoreBytes, s.StreamBytes)
		}
	}
	st, err := OpenStore(store)
	if err != nil || len(st.Runs) != 2 || st.Runs[0].Run != "one" || st.Runs[1].Run != "two" || st.Runs[0].Bytes <= 0 {
		t.Fatalf("OpenStore: %+v %v", st, err)
	}
	if err := st.RemoveRun("one"); err != nil {
		t.Fatal(err)
	}
	if st, err = OpenStore(store); err != nil || len(st.Runs) != 1 || st.Runs[0].Run != "two" {
		t.Fatalf("after RemoveRun: %+v %v", st, err)
	}
	// A run id that was removed can be used again.
	if _, err := Train(context.Background(), smallRun(t, func(c *Config) {
		c.StoreDir = store
		c.Run = "one"
	}), Hooks{Log: testLog(t)}); err != nil {
		t.Fatalf("reusing a removed run id: %v", err)
	}

	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "thesis.tex"), []byte("x"), 0o644)
	foreign := t.TempDir()
	os.MkdirAll(filepath.Join(foreign, "jetstream", "$G", "streams", "ORDERS"), 0o755)
	for _, dir := range []string{other, foreign} {
		if _, err := OpenStore(dir); !errors.Is(err, ErrNotStore) {
			t.Errorf("%s: %v, want ErrNotStore", dir, err)
		}
	}
}

// A run id used twice on one store stops the second run at once with the
// cause and the fix (it hung: the broker dropped the second run's messages,
// whose ids repeated the first's within its duplicate window).
func TestReusedRunRefused(t *testing.T) {
	store := t.TempDir()
	cfg := smallRun(t, func(c *Config) {
		c.StoreDir = store
		c.Run = "X"
	})
	if _, err := Train(context.Background(), cfg, Hooks{Log: testLog(t)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	_, err := Train(ctx, cfg, Hooks{Log: testLog(t)})
	if !errors.Is(err, ErrRunExists) || time.Since(t0) > 10*time.Second {
		t.Fatalf("after %v: %v", time.Since(t0), err)
	}
}

// Repeated runs into one --out keep one store there, the latest run's.
func TestOutKeepsOneStore(t *testing.T) {
	out := t.TempDir()
	for range 2 {
		if _, err := Train(context.Background(), smallRun(t, func(c *Config) {
			c.Out = out
		}), Hooks{Log: testLog(t)}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := OpenStore(out)
	if err != nil || len(st.Runs) != 1 {
		t.Fatalf("%+v %v", st, err)
	}
	// A folder at OUT/stream that is not a store is left alone.
	out2 := t.TempDir()
	os.MkdirAll(filepath.Join(out2, "stream"), 0o755)
	os.WriteFile(filepath.Join(out2, "stream", "notes"), []byte("x"), 0o644)
	if _, err := Train(context.Background(), New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 2
		c.Epochs = 1
		c.Out = out2
	}), Hooks{Log: testLog(t)}); !errors.Is(err, ErrNotStore) {
		t.Fatalf("%v", err)
	}
}

// A store that a live broker holds is not removed under it.
func TestStoreInUseIsNotRemoved(t *testing.T) {
	store := t.TempDir()
	if _, err := Train(context.Background(), smallRun(t, func(c *Config) {
		c.StoreDir = store
		c.Run = "live"
	}), Hooks{Log: testLog(t)}); err != nil {
		t.Fatal(err)
	}
	srv, err := broker.StartServer(context.Background(), broker.ServerConfig{Dir: store})
	if err != nil {
		t.Fatal(err)
	}
	st, err := OpenStore(store)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RemoveRun("live"); !errors.Is(err, broker.ErrStoreInUse) {
		t.Fatalf("RemoveRun with a live broker: %v, want ErrStoreInUse", err)
	}
	if err := st.Remove(); !errors.Is(err, broker.ErrStoreInUse) {
		t.Fatalf("Remove with a live broker: %v, want ErrStoreInUse", err)
	}
	srv.Shutdown()
	if err := st.Remove(); err != nil {
		t.Fatalf("Remove after the broker stopped: %v", err)
	}
}

// Sizes are shown in the binary units they are computed in: 2,000,000
// bytes (--max-store 2MB) is 1.9 MiB, not "1.9 MB".
func TestMBUnits(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{2_000_000, "1.9 MiB"},
		{512 << 10, "512 KiB"},
		{3 << 30, "3.00 GiB"},
	} {
		if got := MB(c.n); got != c.want {
			t.Errorf("MB(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
