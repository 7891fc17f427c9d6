package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPick(t *testing.T) {
	ports, err := Pick("127.0.0.1", 20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	hi := ephemeralStart()
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d twice", p)
		}
		seen[p] = true
		if hi > lowest && (p < lowest || p >= hi) {
			t.Errorf("port %d outside [%d, %d)", p, lowest, hi)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d not free: %v", p, err)
			continue
		}
		l.Close()
	}
	more, err := Pick("127.0.0.1", 20)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range more {
		if seen[p] {
			t.Errorf("port %d handed out again", p)
		}
	}
}

// Ports picked while earlier picks are held open are free.
func TestPickSkipsBusy(t *testing.T) {
	var busy []net.Listener
	for range 50 {
		ports, err := Pick("127.0.0.1", 1)
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])))
		if err != nil {
			t.Fatalf("picked port %d is busy: %v", ports[0], err)
		}
		busy = append(busy, l)
	}
	for _, l := range busy {
		l.Close()
	}
}
