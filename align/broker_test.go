package align

import (
	"bytes"
	"context"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
)

// TestAlignOverBrokerNoPlainIDs runs three organisations over an embedded
// JetStream server with the run's users and permissions, checks the
// result against the plain intersection, and scans every byte of the
// stream's store and of the log for every id.
func TestAlignOverBrokerNoPlainIDs(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a bound on a hang
	defer cancel()
	l, err := StartLocal(ctx, "scan", 2, dir)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	sets := randomSets(r, 3, shortIDs(2000))
	var logBuf bytes.Buffer
	var logMu sync.Mutex
	log := zerolog.New(zerolog.SyncWriter(&lockedWriter{&logBuf, &logMu})).Level(zerolog.DebugLevel)
	res := make([]*Result, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	spec := Spec(1, Normalization{})
	for m := range sets {
		cfg := Config{Run: "scan", ID: m, Parties: 2, Bus: l.Bus(m), Roster: l.Roster, Key: l.Keys[m], Spec: spec, Width: 1, Log: log}
		wg.Add(1)
		go func() { defer wg.Done(); res[m], errs[m] = Run(ctx, cfg, sets[m]) }()
	}
	wg.Wait()
	for m, err := range errs {
		if err != nil {
			t.Fatalf("org %d: %v", m, err)
		}
	}
	checkAligned(t, sets, res)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var store []byte
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		store = append(store, b...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The scan reads the messages: their subjects are there.
	for _, s := range []string{"asyrevel.scan.psi.1", "asyrevel.scan.psih.2", "Asy-Sig"} {
		if !bytes.Contains(store, []byte(s)) {
			t.Fatalf("the store's %d bytes lack %q: the scan does not see the messages", len(store), s)
		}
	}
	var total int64
	for _, r := range res {
		total += r.Stats.BytesSent
	}
	if int64(len(store)) < total/2 {
		t.Fatalf("store of %d bytes for %d bytes sent", len(store), total)
	}
	logMu.Lock()
	logged := logBuf.Bytes()
	logMu.Unlock()
	n := 0
	for _, s := range sets {
		for _, id := range s {
			n++
			if bytes.Contains(store, []byte(id)) {
				t.Fatalf("id %s is in the stream's store", id)
			}
			if bytes.Contains(logged, []byte(id)) {
				t.Fatalf("id %s is in the log", id)
			}
		}
	}
	t.Logf("%d ids absent from %d bytes of store and %d of log", n, len(store), len(logged))
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

var _ broker.Bus = (*broker.JetStream)(nil)
