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

// Handler routes the service's endpoints.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/predict", s.predict)
	mux.HandleFunc("/healthz", s.healthz)
	mux.Handle("/metrics", s.MetricsHandler())
	return mux
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
	case errors.Is(err, ErrMessage):
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
		if len(ids[i]) == 0 || len(ids[i]) > MaxIDLen {
			return nil, fmt.Errorf("id %d has %d bytes (1..%d)", i, len(ids[i]), MaxIDLen)
		}
	}
	return ids, nil
}

func (s *Service) predict(w http.ResponseWriter, r *http.Request) {
	t0 := time.Now()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.fail(w, http.StatusMethodNotAllowed, "POST a JSON body {\"ids\": [...]}")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBody+1))
	if err != nil {
		s.fail(w, http.StatusBadRequest, "reading the body: %v", err)
		return
	}
	if len(body) > MaxRequestBody {
		s.fail(w, http.StatusRequestEntityTooLarge, "the body exceeds %d bytes", MaxRequestBody)
		return
	}
	var req PredictRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.fail(w, http.StatusBadRequest, "malformed JSON: %v (want {\"ids\": [...]})", err)
		return
	}
	if dec.More() {
		s.fail(w, http.StatusBadRequest, "malformed JSON: more than one object")
		return
	}
	if len(req.IDs) == 0 || len(req.IDs) > s.cfg.MaxIDs {
		s.fail(w, http.StatusBadRequest, "give 1 to %d ids, got %d", s.cfg.MaxIDs, len(req.IDs))
		return
	}
	ids, err := parseIDs(req.IDs)
	if err != nil {
		s.fail(w, http.StatusBadRequest, "%v", err)
		return
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

func (s *Service) healthz(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Probe == "" {
		s.reply(w, http.StatusOK, map[string]string{"status": "ok"})
		return
	}
	if _, err := s.cfg.Scorer.Outputs(r.Context(), []string{s.cfg.Probe}); err != nil {
		s.reply(w, StatusOf(err), map[string]string{"status": "unavailable", "error": err.Error()})
		return
	}
	s.reply(w, http.StatusOK, map[string]string{"status": "ok"})
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
