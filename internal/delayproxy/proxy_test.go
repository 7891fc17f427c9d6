package delayproxy_test

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/internal/delayproxy"
)

// echo serves an echo on loopback and returns its address.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// A round trip through the proxy takes at least twice the delay (and not
// much more), and a large transfer arrives intact and in order.
func TestDelay(t *testing.T) {
	for _, delay := range []time.Duration{0, 15 * time.Millisecond} {
		p, err := delayproxy.Listen("127.0.0.1:0", echo(t), delay)
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		var best time.Duration = time.Hour
		for range 5 {
			t0 := time.Now()
			if _, err := c.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("%q %v", buf, err)
			}
			best = min(best, time.Since(t0))
		}
		if best < 2*delay || best > 2*delay+200*time.Millisecond {
			t.Errorf("delay %v: round trip %v, want about %v", delay, best, 2*delay)
		}
		// 1 MB each way, written while it is read back.
		data := make([]byte, 1<<20)
		rand.Read(data)
		go c.Write(data)
		got := make([]byte, len(data))
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("delay %v: 1 MB through the proxy: %v, equal %v", delay, err, bytes.Equal(got, data))
		}
		// Close ends the connections through it.
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(buf); err == nil {
			t.Error("a connection survived Close")
		}
		c.Close()
	}
}

// A target that is not listening: the client's connection is closed, the
// proxy goes on.
func TestNoTarget(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	p, err := delayproxy.Listen("127.0.0.1:0", dead, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read from a proxied connection without target: %v, want EOF", err)
	}
	if _, err := delayproxy.Listen("127.0.0.1:0", dead, -time.Second); err == nil {
		t.Error("a negative delay was accepted")
	}
}
