package delayproxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards connections from its listener to a target address, each
// chunk delayed by Delay in each direction.
type Proxy struct {
	target string
	delay  time.Duration
	ln     net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// maxQueued bounds the chunks in flight in one direction of a connection;
// a reader that gets that far ahead of the delay waits (back pressure).
const maxQueued = 4096

// chunkSize is the largest chunk one read takes.
const chunkSize = 32 << 10

// Listen starts a proxy on addr (host:port; port 0 picks one) in front of
// target, adding delay to each direction.
func Listen(addr, target string, delay time.Duration) (*Proxy, error) {
	if delay < 0 {
		return nil, fmt.Errorf("delayproxy: negative delay %v", delay)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("delayproxy: %w", err)
	}
	p := &Proxy{target: target, delay: delay, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops listening, closes every connection through the proxy and
// waits for its goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	server, err := (&net.Dialer{}).DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil || !p.track(server) {
		return
	}
	defer p.untrack(server)
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(server, client); client.Close(); server.Close() })
	wg.Go(func() { p.pipe(client, server); client.Close(); server.Close() })
	wg.Wait()
}

type chunk struct {
	at  time.Time
	buf []byte
}

var pool = sync.Pool{New: func() any { b := make([]byte, chunkSize); return &b }}

// pipe copies src to dst, each chunk delay after it was read.
func (p *Proxy) pipe(dst io.Writer, src io.Reader) {
	q := make(chan chunk, maxQueued)
	done := make(chan struct{})
	go func() {
		defer close(done)
		timer := time.NewTimer(0)
		<-timer.C
		failed := false
		for c := range q {
			if !failed {
				if d := time.Until(c.at.Add(p.delay)); d > 0 {
					timer.Reset(d)
					<-timer.C
				}
				if _, err := dst.Write(c.buf); err != nil {
					failed = true // drain the queue; the reader ends at the close
				}
			}
			b := c.buf[:cap(c.buf)]
			pool.Put(&b)
		}
	}()
	for {
		bp := pool.Get().(*[]byte)
		n, err := src.Read(*bp)
		if n > 0 {
			q <- chunk{at: time.Now(), buf: (*bp)[:n]}
		} else {
			pool.Put(bp)
		}
		if err != nil {
			break // EOF, or a reset or closed connection: the pipe ends
		}
	}
	close(q)
	<-done
}
