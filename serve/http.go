package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/schemas"
)

// Limits of the HTTP service.
const (
	DefaultMaxIDs  = 1000    // ids in one POST /v1/predict
	MaxRequestBody = 1 << 20 // bytes of a request body
)

// ServiceConfig configures the HTTP service.
type ServiceConfig struct {
	Scorer *Scorer
	Labels *LabelsSpec
	// MaxIDs bounds the ids of one request (default DefaultMaxIDs).
	MaxIDs int
	// Probe, if set, is an id /healthz scores to check that every party
	// answers; without it /healthz only says the process is up.
	Probe string
	// Resolve, if set, turns an id of a request (a key as an organisation
	// writes it) into the sample id the parties hold (Deployment.Resolve);
	// answers keep the request's ids.
	Resolve func(string) string
	Log     zerolog.Logger
	// Auth checks every request to /v1/predict and /metrics (a client
	// token with the endpoint's scope, and the client's rate). Without
	// Auth every such request is refused (401) unless InsecureNoAuth,
	// which answers everyone and says so in /healthz. /healthz is open.
	Auth           *Auth
	InsecureNoAuth bool
	// Access, if set, records every request to /v1/predict and /metrics
	// (who asked for which ids, hashed).
	Access *AccessLog
}

// Service is the HTTP front of a Scorer: POST /v1/predict, GET /healthz,
// GET /metrics. Safe for concurrent use.
type Service struct {
	cfg   ServiceConfig
	start time.Time
	// The metrics (Registry): a registry of the Service's own.
	reg   *prometheus.Registry
	codes *prometheus.CounterVec
	ids   prometheus.Counter
	lat   prometheus.Histogram
}

// NewService makes the HTTP service of cfg.Scorer.
func NewService(cfg ServiceConfig) *Service {
	if cfg.MaxIDs <= 0 {
		cfg.MaxIDs = DefaultMaxIDs
	}
	if cfg.Auth != nil {
		cfg.Auth.setMinBurst(cfg.MaxIDs)
	}
	s := &Service{cfg: cfg, start: time.Now(), reg: prometheus.NewRegistry()}
	s.codes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "asyrevel_serve_requests_total", Help: "HTTP requests answered, by status code."}, []string{"code"})
	s.ids = prometheus.NewCounter(prometheus.CounterOpts{Name: "asyrevel_serve_ids_total", Help: "Ids scored."})
	s.lat = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "asyrevel_serve_predict_seconds", Help: "Latency of successful POST /v1/predict requests.",
		Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}})
	s.reg.MustRegister(s.codes, s.ids, s.lat, scorerCollector{s},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "asyrevel_serve_uptime_seconds", Help: "Seconds since the service started."},
			func() float64 { return time.Since(s.start).Seconds() }),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return s
}

// Registry is the service's metrics registry, which GET /metrics serves
// (and asyrevel serve --metrics ADDR on an address of its own).
func (s *Service) Registry() *prometheus.Registry { return s.reg }

// MetricsHandler serves the service's metrics in the Prometheus formats.
func (s *Service) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg})
}

// Handler routes the service's endpoints: /v1/predict and /metrics behind
// the client check (guard), /healthz open.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/predict", s.guard(ScopePredict, s.predict))
	mux.HandleFunc("/healthz", s.healthz)
	mux.Handle("/metrics", s.guard(ScopeMetrics, func(w http.ResponseWriter, r *http.Request, _ *request) { s.MetricsHandler().ServeHTTP(w, r) }))
	return mux
}

// request is what the guard knows of a request, for the handler and the
// access log.
type request struct {
	client *clientState // nil without authentication
	name   string
	ids    []string
	reason string
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// guard authenticates a request for scope, takes one id from its client's
// bucket, runs next and records the request in the access log.
func (s *Service) guard(scope string, next func(http.ResponseWriter, *http.Request, *request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		req := &request{name: "-"}
		if s.cfg.Access != nil {
			defer func() {
				s.cfg.Access.Record(AccessEntry{Time: t0.UTC(), Client: req.name, Remote: r.RemoteAddr, Method: r.Method, Path: r.URL.Path,
					Status: sw.status, Millis: float64(time.Since(t0).Microseconds()) / 1000, Reason: req.reason}, req.ids)
			}()
		}
		switch {
		case s.cfg.InsecureNoAuth:
			req.name = "-insecure-no-auth"
		case s.cfg.Auth == nil:
			s.refuse(sw, req, &refusal{code: http.StatusUnauthorized, reason: "no_clients", msg: "this service has no clients configured",
				fix: "the operator issues tokens (" + issueHint + ") and starts the service with them (serve --clients DIR/clients.json)"})
			return
		default:
			st, ref := s.cfg.Auth.check(r, scope)
			if st != nil {
				req.client, req.name = st, st.Name
			}
			if ref != nil {
				s.refuse(sw, req, ref)
				return
			}
			if ok, wait := st.take(1, s.cfg.Auth.cfg.Now()); !ok {
				s.refuse(sw, req, overRate(st, wait))
				return
			}
		}
		next(sw, r, req)
	})
}

// refusalJSON is the body of a 401, 403 or 429: what is wrong and the fix.
type refusalJSON struct {
	Error string `json:"error"`
	Fix   string `json:"fix"`
}

// refuse answers a refused request.
func (s *Service) refuse(w http.ResponseWriter, req *request, ref *refusal) {
	req.reason = ref.reason
	switch ref.code {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="asyrevel serve"`)
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", strconv.Itoa(int(ref.retry/time.Second)))
	}
	s.reply(w, ref.code, refusalJSON{Error: ref.msg, Fix: ref.fix})
}

// PredictRequest is the body of POST /v1/predict.
type PredictRequest struct {
	IDs []json.RawMessage `json:"ids"`
}

// PredictionJSON is one prediction of a response.
type PredictionJSON struct {
	ID            string    `json:"id"`
	Label         any       `json:"label"` // the data's label value (a number) or the class name
	Probabilities []float64 `json:"probabilities"`
}

// PredictResponse is the body of a successful POST /v1/predict.
type PredictResponse struct {
	Predictions []PredictionJSON `json:"predictions"`
}

type errorJSON struct {
	Error string `json:"error"`
}

func (s *Service) reply(w http.ResponseWriter, code int, v any) {
	s.codes.WithLabelValues(strconv.Itoa(code)).Inc()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func (s *Service) fail(w http.ResponseWriter, code int, format string, a ...any) {
	s.reply(w, code, errorJSON{Error: fmt.Sprintf(format, a...)})
}

// StatusOf is the HTTP status of a Score error.
func StatusOf(err error) int {
	switch {
	case errors.Is(err, ErrUnknownID):
		return http.StatusNotFound
	case errors.Is(err, ErrRefused):
		return http.StatusForbidden
	case errors.Is(err, ErrPartyDown), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrPartyFailed):
		return http.StatusBadGateway
	case errors.Is(err, schemas.ErrScore):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// parseIDs reads the ids of a request: strings, or integers (written as
// their decimal text).
func parseIDs(raw []json.RawMessage) ([]string, error) {
	ids := make([]string, len(raw))
	for i, r := range raw {
		r = bytes.TrimSpace(r)
		if len(r) > 0 && r[0] == '"' {
			if err := json.Unmarshal(r, &ids[i]); err != nil {
				return nil, fmt.Errorf("id %d: %w", i, err)
			}
		} else {
			n, err := strconv.ParseInt(string(r), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("id %d (%s) is neither a string nor an integer", i, r)
			}
			ids[i] = strconv.FormatInt(n, 10)
		}
		if len(ids[i]) == 0 || len(ids[i]) > schemas.MaxScoreIDLen {
			return nil, fmt.Errorf("id %d has %d bytes (1..%d)", i, len(ids[i]), schemas.MaxScoreIDLen)
		}
	}
	return ids, nil
}

func (s *Service) predict(w http.ResponseWriter, r *http.Request, req *request) {
	t0 := time.Now()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.fail(w, http.StatusMethodNotAllowed, "POST a JSON body {\"ids\": [...]}")
		return
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBody+1))
	if err != nil {
		s.fail(w, http.StatusBadRequest, "reading the body: %v", err)
		return
	}
	if len(raw) > MaxRequestBody {
		s.fail(w, http.StatusRequestEntityTooLarge, "the body exceeds %d bytes", MaxRequestBody)
		return
	}
	var body PredictRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		s.fail(w, http.StatusBadRequest, "malformed JSON: %v (want {\"ids\": [...]})", err)
		return
	}
	if dec.More() {
		s.fail(w, http.StatusBadRequest, "malformed JSON: more than one object")
		return
	}
	if len(body.IDs) == 0 || len(body.IDs) > s.cfg.MaxIDs {
		s.fail(w, http.StatusBadRequest, "give 1 to %d ids, got %d", s.cfg.MaxIDs, len(body.IDs))
		return
	}
	ids, err := parseIDs(body.IDs)
	if err != nil {
		s.fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	req.ids = ids
	if st := req.client; st != nil {
		st.refund(1) // the guard's, taken before the ids were known
		if ok, wait := st.take(len(ids), s.cfg.Auth.cfg.Now()); !ok {
			s.refuse(w, req, overRate(st, wait))
			return
		}
	}
	keys := ids
	if s.cfg.Resolve != nil {
		keys = make([]string, len(ids))
		for i, id := range ids {
			keys[i] = s.cfg.Resolve(id)
		}
	}
	preds, err := s.cfg.Scorer.Score(r.Context(), keys)
	if err != nil {
		code := StatusOf(err)
		if r.Context().Err() != nil {
			code = 499 // the client went away
		}
		msg := err.Error()
		for i := range keys {
			if keys[i] != ids[i] { // the ids as the request wrote them
				msg = strings.ReplaceAll(msg, strconv.Quote(keys[i]), strconv.Quote(ids[i]))
			}
		}
		s.fail(w, code, "%s", msg)
		return
	}
	resp := PredictResponse{Predictions: make([]PredictionJSON, len(ids))}
	l := s.cfg.Labels
	for i, p := range preds {
		var label any = l.Values[p.Class]
		if len(l.Names) > 0 && l.Names[p.Class] != "" {
			label = l.Names[p.Class]
		}
		resp.Predictions[i] = PredictionJSON{ID: ids[i], Label: label, Probabilities: p.Probs}
	}
	s.ids.Add(float64(len(ids)))
	s.lat.Observe(time.Since(t0).Seconds())
	s.reply(w, http.StatusOK, resp)
}

// AuthState is how the service checks its clients, as /healthz says it.
func (s *Service) AuthState() string {
	switch {
	case s.cfg.InsecureNoAuth:
		return AuthOff
	case s.cfg.Auth == nil:
		return "no clients configured: every request is refused"
	}
	return "client tokens"
}

// AuthOff is /healthz's auth field without authentication.
const AuthOff = "OFF (--insecure-no-auth): every request is answered without credentials"

func (s *Service) healthz(w http.ResponseWriter, r *http.Request) {
	auth := s.AuthState()
	if s.cfg.Probe == "" {
		s.reply(w, http.StatusOK, map[string]string{"status": "ok", "auth": auth})
		return
	}
	if _, err := s.cfg.Scorer.Outputs(r.Context(), []string{s.cfg.Probe}); err != nil {
		s.reply(w, StatusOf(err), map[string]string{"status": "unavailable", "error": err.Error(), "auth": auth})
		return
	}
	s.reply(w, http.StatusOK, map[string]string{"status": "ok", "auth": auth})
}

// The scorer's counters, read at scrape time.
var (
	dTimeouts = prometheus.NewDesc("asyrevel_serve_party_timeouts_total", "Scoring requests a party did not answer in time.", nil, nil)
	dLate     = prometheus.NewDesc("asyrevel_serve_late_answers_total", "Party answers after their request ended.", nil, nil)
	dRejected = prometheus.NewDesc("asyrevel_serve_rejected_total", "Party answers rejected (forged, malformed), by reason.", []string{"reason"}, nil)
)

// scorerCollector exports the Scorer's counters.
type scorerCollector struct{ s *Service }

func (c scorerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- dTimeouts
	ch <- dLate
	ch <- dRejected
}

func (c scorerCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.cfg.Scorer.Stats()
	ch <- prometheus.MustNewConstMetric(dTimeouts, prometheus.CounterValue, float64(st.Timeouts))
	ch <- prometheus.MustNewConstMetric(dLate, prometheus.CounterValue, float64(st.Late))
	for r, n := range st.Rejected {
		ch <- prometheus.MustNewConstMetric(dRejected, prometheus.CounterValue, float64(n), r)
	}
}
