package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest port picked; the range is [lowest, start of the ephemeral range).
const lowest = 10000

var (
	mu     sync.Mutex
	handed = map[int]bool{} // ports this process picked before
)

// Pick returns n distinct TCP ports on host that were free a moment ago,
// below the ephemeral range when the system says where it starts (and
// from port 0 otherwise). Ports are not handed out twice in a process.
func Pick(host string, n int) ([]int, error) {
	mu.Lock()
	defer mu.Unlock()
	hi := ephemeralStart()
	ports := make([]int, 0, n)
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		port := 0
		if hi > lowest && tries < 100*n {
			port = lowest + rand.IntN(hi-lowest)
			if handed[port] {
				continue
			}
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			if port != 0 {
				continue
			}
			return nil, fmt.Errorf("freeport: %w", err)
		}
		ls = append(ls, l)
		p := l.Addr().(*net.TCPAddr).Port
		handed[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

// ephemeralStart is the first port of the kernel's ephemeral range, or 0
// when unknown.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 0
	}
	p, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return p
}
