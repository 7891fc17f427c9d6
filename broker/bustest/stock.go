package bustest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/internal/freeport"
)

// StockServerEnv names the environment variable that points at a stock
// nats-server binary; without it StartStockServer looks for nats-server
// in PATH and in /usr/sbin (where Debian's package puts it).
const StockServerEnv = "ASYREVEL_NATS_SERVER"

// StockServerBinary finds a stock nats-server binary ("" if there is none).
func StockServerBinary() string {
	if p := os.Getenv(StockServerEnv); p != "" {
		return p
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nats-server"); err == nil {
		return "/usr/sbin/nats-server"
	}
	return ""
}

// StartStockServer starts a stock nats-server binary with JetStream on a
// free loopback port and a store in a temporary directory, and returns
// its URL and version. It skips the test when no binary is found (install
// Debian's nats-server package, or set ASYREVEL_NATS_SERVER), and stops
// the server when the test ends.
func StartStockServer(t testing.TB) (url, version string) {
	t.Helper()
	return StartStockServerConfig(t, "")
}

// StartStockServerConfig is StartStockServer with config appended to the
// server's configuration file (for example the authorization block of
// asyrevel keys server-config). A server that refuses the file fails the
// test with its log.
func StartStockServerConfig(t testing.TB, config string) (url, version string) {
	t.Helper()
	bin := StockServerBinary()
	if bin == "" {
		t.Skipf("no stock nats-server binary: install one (apt-get install nats-server) or set %s", StockServerEnv)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v: %s", bin, err, out)
	}
	version = string(bytes.TrimPrefix(bytes.TrimSpace(out), []byte("nats-server: v")))
	ports, err := freeport.Pick("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	port := ports[0]
	dir := t.TempDir()
	// The stock default (1 MB) is too tight for a 1 MiB payload with its
	// headers; the embedded server allows 4 MiB.
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte("max_payload: 4MB\n"+config), 0o600); err != nil {
		t.Fatal(err)
	}
	var logBuf syncBuffer
	cmd := exec.Command(bin, "-c", conf, "-js", "-sd", filepath.Join(dir, "store"), "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-done:
			t.Fatalf("%s exited: %v\n%s", bin, err, logBuf.String())
		case <-ctx.Done():
			t.Fatalf("%s not listening on %s: %v\n%s", bin, addr, err, logBuf.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Sprintf("nats://%s", addr), version
}

// syncBuffer is a bytes.Buffer for a writer and a reader on two goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
