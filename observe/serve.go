package observe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ErrListen reports an address a metrics or board server cannot listen on.
var ErrListen = errors.New("cannot listen")

// MetricsHandler serves reg in the Prometheus exposition formats.
func MetricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, Timeout: 10 * time.Second})
}

// Handler serves the Watch's metrics at /metrics (and / says where they are).
func (w *Watch) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", MetricsHandler(w.reg))
	mux.HandleFunc("/", func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(rw, r)
			return
		}
		fmt.Fprintln(rw, "asyrevel: the metrics are at /metrics")
	})
	return mux
}

// Server is an HTTP server of this package on its own address.
type Server struct {
	srv  *http.Server
	addr string
	done chan struct{}
}

// Listen starts serving h on addr (host:port; port 0 picks a free one)
// at once, so that a taken address is reported before the run starts.
func Listen(addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w on %s: %w", ErrListen, addr, err)
	}
	s := &Server{
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute},
		addr: ln.Addr().String(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.addr }

// URL is the server's address as an http URL with path.
func (s *Server) URL(path string) string { return "http://" + s.addr + path }

// Close stops the server, letting requests under way finish for up to a
// second.
func (s *Server) Close() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if s.srv.Shutdown(ctx) != nil {
		s.srv.Close()
	}
	<-s.done
}
