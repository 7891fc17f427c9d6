// Package wan puts a wide-area link between two endpoints on this
// machine: a TCP proxy (Toxiproxy, used as a library) that delays what
// goes through it, both ways. This machine has network namespaces but
// no netem qdisc, so the delay is injected by a proxy in front of the
// broker, on the connections of the parties that sit "far away".
package wan

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Link is a link's delay: each direction waits Delay, give or take
// Jitter (uniform), so a round trip takes about 2*Delay.
type Link struct {
	Delay, Jitter time.Duration
}

// String says what the link does, e.g. "10ms±2ms each way".
func (l Link) String() string {
	if l.Jitter == 0 {
		return l.Delay.String() + " each way"
	}
	return fmt.Sprintf("%v±%v each way", l.Delay, l.Jitter)
}

// ErrLink reports a link that cannot be built (a negative delay, a
// jitter larger than the delay).
var ErrLink = errors.New("wan: bad link")

// Proxy is a listening proxy: connections to Addr reach the upstream
// through the link.
type Proxy struct {
	Addr string // host:port to dial instead of the upstream
	p    *toxiproxy.Proxy
}

// Start listens on a free loopback port and forwards every connection to
// upstream (host:port, or a nats:// URL) through link.
func Start(name, upstream string, link Link) (*Proxy, error) {
	if link.Delay < 0 || link.Jitter < 0 || link.Jitter > link.Delay {
		return nil, fmt.Errorf("%w: delay %v, jitter %v", ErrLink, link.Delay, link.Jitter)
	}
	upstream = strings.TrimPrefix(upstream, "nats://")
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		return nil, fmt.Errorf("wan: upstream %q: %w", upstream, err)
	}
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("wan: proxy %s: %w", name, err)
	}
	if link.Delay > 0 {
		for _, dir := range []string{"upstream", "downstream"} {
			js := fmt.Sprintf(`{"name":"delay_%s","type":"latency","stream":%q,"toxicity":1,"attributes":{"latency":%d,"jitter":%d}}`,
				dir, dir, link.Delay.Milliseconds(), link.Jitter.Milliseconds())
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
				p.Stop()
				return nil, fmt.Errorf("wan: proxy %s: %w", name, err)
			}
		}
	}
	return &Proxy{Addr: p.Listen, p: p}, nil
}

// URL is the proxy's address as a NATS URL.
func (p *Proxy) URL() string { return "nats://" + p.Addr }

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() { p.p.Stop() }
