package wan

import (
	"bufio"
	"errors"
	"net"
	"testing"
	"time"
)

// A round trip through the proxy takes the link's two delays (and not
// much more), bytes arrive unchanged and in order, and a bad link is
// refused.
func TestLinkDelays(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	for _, link := range []Link{{}, {Delay: 30 * time.Millisecond}, {Delay: 30 * time.Millisecond, Jitter: 10 * time.Millisecond}} {
		p, err := Start("echo", ln.Addr().String(), link)
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		var worst, best time.Duration = 0, time.Hour
		for i := range 5 {
			msg := string(rune('a'+i)) + "-hello\n"
			t0 := time.Now()
			if _, err := c.Write([]byte(msg)); err != nil {
				t.Fatal(err)
			}
			got, err := r.ReadString('\n')
			if err != nil || got != msg {
				t.Fatalf("%v: got %q (%v), want %q", link, got, err, msg)
			}
			d := time.Since(t0)
			worst, best = max(worst, d), min(best, d)
		}
		c.Close()
		p.Close()
		lo := 2 * (link.Delay - link.Jitter)
		if best < lo || worst > 2*(link.Delay+link.Jitter)+200*time.Millisecond {
			t.Errorf("%v: round trips %v to %v, want at least %v", link, best, worst, lo)
		}
	}
	if _, err := Start("bad", ln.Addr().String(), Link{Delay: time.Millisecond, Jitter: time.Second}); !errors.Is(err, ErrLink) {
		t.Errorf("jitter past the delay: %v, want ErrLink", err)
	}
}
