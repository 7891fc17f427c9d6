package serve

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/asyrevel/asyrevel/align"
	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/internal/atomicfile"
	"github.com/asyrevel/asyrevel/privacy/metric"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// Defaults of batch scoring.
const (
	DefaultChunk  = 4096 // ids a request
	DefaultWindow = 4    // requests in flight
)

// PredictConfig is one batch scoring: asyrevel predict.
type PredictConfig struct {
	// Models is the folder of model files (a run's OUT/models). With
	// Parties false (separate processes) only aggregator.model is read.
	Models string
	// Data is the file (or split folder) to score; Split the split of a
	// split folder (SplitAuto: its test set, or its training set if it has
	// none; SplitAll: every set). Inputs, instead of Data, are the
	// organisations' own files, joined in this process (ReadInputs).
	Data   string
	Split  string
	Inputs *Inputs
	// Out is predictions.csv; Metrics, if set, where the metrics go as
	// JSON (default: next to Out, .metrics.json in place of .csv).
	Out     string
	Metrics string
	// Keys is the run's keys folder (roster.json and the .nk files):
	// messages are signed and verified, the model files checked against
	// the roster. "" = MODELS/../keys if it has a roster, else none.
	Keys string
	// Roster is the run's roster.json: the model files are checked
	// against it (each signed by the participant it names) when the keys
	// folder is elsewhere or absent. TrustUnsigned accepts model files
	// without any roster to check them against (see DeployConfig).
	Roster        string
	TrustUnsigned bool
	// Net is the broker; Net.Run defaults to the models' run id.
	Net NetConfig
	// Separate: the parties are separate processes (asyrevel party
	// --serve) on Net.NATS; this process is the aggregator alone and
	// waits up to Wait for them to answer.
	Separate bool
	Wait     time.Duration
	// Chunk is ids a request, Window requests in flight, Timeout a
	// request's wait for the parties (default DefaultBatchTimeout).
	Chunk, Window int
	Timeout       time.Duration
	Log           zerolog.Logger
	// Progress, if set, is called after each chunk.
	Progress func(done, total int)
}

// Metrics are the outcome of a batch scoring.
type Metrics struct {
	Run        string  `json:"run"`
	Data       string  `json:"data"`
	Rows       int     `json:"rows"`
	Parties    int     `json:"parties"`
	Classes    int     `json:"classes"`
	Labelled   bool    `json:"labelled"`
	Accuracy   float64 `json:"accuracy,omitempty"`
	AUC        float64 `json:"auc,omitempty"`
	LogLoss    float64 `json:"log_loss,omitempty"`
	Seconds    float64 `json:"seconds"` // scoring alone: requests sent to predictions combined
	PerSecond  float64 `json:"predictions_per_second"`
	LoadSecond float64 `json:"load_seconds"` // reading the models and the data
	Bus        string  `json:"bus"`
	Signed     bool    `json:"signed"`
	// ModelsChecked: the model files were checked against the run's
	// roster (false only with TrustUnsigned).
	ModelsChecked bool   `json:"models_checked"`
	Out           string `json:"out,omitempty"`

	// Inputs is what ReadInputs found (Inputs only).
	Inputs *InputsReport `json:"inputs,omitempty"`

	// Classes and predictions, for callers that want them (not in JSON).
	Predictions []Prediction `json:"-"`
	IDs         []string     `json:"-"`
	Y           []int32      `json:"-"`
}

func (c *PredictConfig) defaults() {
	if c.Chunk <= 0 {
		c.Chunk = DefaultChunk
	}
	c.Chunk = min(c.Chunk, schemas.MaxScoreIDs)
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.Wait <= 0 {
		c.Wait = 30 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultBatchTimeout
	}
	if c.Metrics == "" && c.Out != "" {
		c.Metrics = strings.TrimSuffix(c.Out, ".csv") + ".metrics.json"
	}
}

// NoKeys as the keys folder turns the messages' signatures off (measuring
// their cost); the model files are still checked against the roster
// beside them (MODELS/../keys/roster.json) or DeployConfig.Roster.
const NoKeys = "-"

// ErrNoRoster: model files with no roster to check them against. A model
// file's own signature only says that somebody signed it: whoever can
// write the models folder can re-sign a changed model with a key of their
// own. The roster ties each file to its participant's key.
var ErrNoRoster = errors.New("serve: no roster to check the model files against")

// modelRoster is the roster the model files are checked against: the
// Roster file, else the keys folder's, else (NoKeys) the one beside the
// models; nil only with TrustUnsigned.
func modelRoster(cfg *DeployConfig, keys *Keys) (*trust.Roster, error) {
	var r *trust.Roster
	if cfg.Roster != "" {
		var err error
		if r, err = trust.ReadRoster(cfg.Roster); err != nil {
			return nil, fmt.Errorf("--roster: %w", err)
		}
		if kr := keys.RosterOrNil(); kr != nil && !bytes.Equal(kr.Marshal(), r.Marshal()) {
			return nil, fmt.Errorf("%w: the roster %s differs from the keys folder's", ErrMismatch, cfg.Roster)
		}
		return r, nil
	}
	if r = keys.RosterOrNil(); r != nil {
		return r, nil
	}
	if cfg.Keys == NoKeys {
		p := filepath.Join(filepath.Dir(filepath.Clean(cfg.Models)), "keys", "roster.json")
		if _, err := os.Stat(p); err == nil {
			return trust.ReadRoster(p)
		}
	}
	if cfg.TrustUnsigned {
		return nil, nil
	}
	return nil, fmt.Errorf("%w in %s: give the run's keys folder (--keys DIR; MODELS/../keys is looked at) or its roster "+
		"(--roster FILE), or --trust-unsigned to score with model files that nobody vouches for (a model re-signed with any key, "+
		"or not signed at all, is then accepted)", ErrNoRoster, cfg.Models)
}

// keysFor finds the keys of a models folder.
func keysFor(models, dir string) (*Keys, error) {
	if dir == NoKeys {
		return nil, nil
	}
	if dir == "" {
		dir = filepath.Join(filepath.Dir(filepath.Clean(models)), "keys")
		if _, err := os.Stat(filepath.Join(dir, "roster.json")); err != nil {
			return nil, nil
		}
	}
	k, err := LoadKeys(dir)
	if err == nil && k == nil {
		err = fmt.Errorf("%w: %s has no roster.json", ErrSignature, dir)
	}
	return k, err
}

// DeployConfig is what Deploy starts.
type DeployConfig struct {
	Models, Data, Split, Keys string
	// Inputs, instead of Data, are the organisations' own files, joined
	// in this process (ReadInputs; not with Separate).
	Inputs *Inputs
	// Roster is the run's roster.json, which the model files are checked
	// against (default: the keys folder's). Without a roster Deploy
	// refuses (ErrNoRoster) unless TrustUnsigned, and then says so at
	// Warn.
	Roster        string
	TrustUnsigned bool
	Net           NetConfig
	Separate      bool
	Wait, Timeout time.Duration
	// SealIdle is the scorer's (ScorerConfig.SealIdle).
	SealIdle time.Duration
	Log      zerolog.Logger
	// PartyURL, if set, gives the broker address party m connects to,
	// given the broker's own ("" = the broker's own): a proxy in front of
	// it.
	PartyURL func(m int, broker string) (string, error)
}

// Deployment is the participants of a scoring process, started on their
// broker: every party (a Responder each, on its own connection) and the
// aggregator's Scorer, or, with Separate, the Scorer alone.
type Deployment struct {
	Set        *Set
	Net        *Network
	Scorer     *Scorer
	Responders []*Responder
	Parties    []broker.Bus // the parties' connections (nil with Separate)
	Rows       []*Rows
	IDs        []string // the data's ids, in order
	Y          []int32  // their classes, nil without labels
	// Labels is all the aggregator read of the data (ids, classes, and
	// for an alignment the keys as the label holder writes them).
	Labels *LabelRows
	// Resolve, when not nil, turns a key as an organisation writes it
	// into the sample id of its row (an alignment's normalisation): the
	// service answers requests by the keys as written.
	Resolve func(string) string
	// Inputs is what ReadInputs found (DeployConfig.Inputs only).
	Inputs *InputsReport
	Keys   *Keys
	// ModelRoster is the roster the model files were checked against;
	// nil when they were accepted unchecked (TrustUnsigned).
	ModelRoster *trust.Roster
	Load        time.Duration

	cancel context.CancelFunc
	buses  []broker.Bus
	closes []func() error
}

// Deploy reads the models and the data and starts the participants.
func Deploy(ctx context.Context, cfg DeployConfig) (_ *Deployment, err error) {
	t0 := time.Now()
	if cfg.Wait <= 0 {
		cfg.Wait = 30 * time.Second
	}
	d := &Deployment{}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if d.Keys, err = keysFor(cfg.Models, cfg.Keys); err != nil {
		return nil, err
	}
	keys := d.Keys
	if d.ModelRoster, err = modelRoster(&cfg, keys); err != nil {
		return nil, err
	}
	if d.ModelRoster == nil {
		cfg.Log.Warn().Str("models", cfg.Models).Msg("--trust-unsigned: the model files are NOT checked against the run's roster; a model re-signed with any key, or not signed at all, is accepted")
	}
	var lab *LabelRows
	if cfg.Inputs != nil && cfg.Separate {
		return nil, fmt.Errorf("%w: --inputs joins every organisation's file in this process: with separate parties, each aligns its rows (asyrevel align --nats ...) and serves its folder", ErrMismatch)
	}
	if cfg.Separate {
		agg, err := Load(filepath.Join(cfg.Models, FileName(0)))
		if err != nil {
			return nil, err
		}
		if err := agg.CheckSigner(d.ModelRoster); err != nil {
			return nil, err
		}
		d.Set = &Set{Aggregator: agg}
		if lab, err = ReadLabels(cfg.Data, agg, cfg.Split); err != nil {
			return nil, err
		}
		if cfg.Net.NATS == "" {
			return nil, fmt.Errorf("%w: the parties are separate processes: give the broker (--nats URL)", ErrMismatch)
		}
	} else {
		if d.Set, err = LoadSet(cfg.Models, d.ModelRoster); err != nil {
			return nil, err
		}
		if cfg.Inputs != nil {
			if d.Rows, lab, d.Inputs, err = ReadInputs(*cfg.Inputs, d.Set); err != nil {
				return nil, err
			}
			d.Resolve = align.KeyResolver(cfg.Inputs.Options.Norm, len(cfg.Inputs.Options.Key))
		} else if d.Rows, lab, err = ReadAll(cfg.Data, d.Set, cfg.Split); err != nil {
			return nil, err
		}
	}
	if cfg.Inputs == nil {
		if d.Resolve, err = Resolver(cfg.Data); err != nil {
			return nil, err
		}
	}
	agg := d.Set.Aggregator
	if len(lab.IDs) == 0 {
		return nil, fmt.Errorf("%w: %s has no rows", ErrData, cfg.Data)
	}
	if _, err := Index(lab.IDs); err != nil {
		return nil, err
	}
	d.IDs, d.Y, d.Labels = lab.IDs, lab.Y, lab
	if cfg.Net.Run == "" {
		cfg.Net.Run = agg.Run
	}
	if d.Net, err = OpenNetwork(ctx, cfg.Net); err != nil {
		return nil, err
	}
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel = cancel
	for m, p := range d.Rows {
		var b broker.Bus
		via := ""
		if cfg.PartyURL != nil {
			if via, err = cfg.PartyURL(m+1, d.Net.URL()); err != nil {
				return nil, err
			}
		}
		if via != "" {
			b, err = d.Net.ConnectVia(ctx, fmt.Sprintf("party-%d", m+1), keys.Key(m+1), via)
		} else {
			b, err = d.Net.Connect(ctx, fmt.Sprintf("party-%d", m+1), keys.Key(m+1))
		}
		if err != nil {
			return nil, err
		}
		d.buses = append(d.buses, b)
		d.Parties = append(d.Parties, b)
		r, err := NewResponder(ctx, ResponderConfig{Run: cfg.Net.Run, Model: d.Set.Parties[m], Rows: p, Key: keys.Key(m + 1), Roster: keys.RosterOrNil(), Log: cfg.Log})
		if err != nil {
			return nil, err
		}
		d.closes = append(d.closes, r.Close)
		d.Responders = append(d.Responders, r)
		if _, err := r.Subscribe(gctx, b); err != nil {
			return nil, err
		}
	}
	ab, err := d.Net.Connect(ctx, "aggregator", keys.Key(0))
	if err != nil {
		return nil, err
	}
	d.buses = append(d.buses, ab)
	if d.Scorer, err = NewScorer(ScorerConfig{Run: cfg.Net.Run, Model: agg, Key: keys.Key(0), Roster: keys.RosterOrNil(), Timeout: cfg.Timeout, SealIdle: cfg.SealIdle, Log: cfg.Log}); err != nil {
		return nil, err
	}
	if err := d.Scorer.Start(gctx, ab); err != nil {
		return nil, err
	}
	if cfg.Separate {
		if err := waitParties(ctx, d.Scorer, lab.IDs[0], cfg.Wait, cfg.Log); err != nil {
			return nil, err
		}
	}
	d.Load = time.Since(t0)
	return d, nil
}

// Close stops the participants and the broker.
func (d *Deployment) Close() {
	if d.Scorer != nil {
		d.Scorer.Close()
	}
	if d.cancel != nil {
		d.cancel()
	}
	for _, b := range d.buses {
		b.Close()
	}
	for _, c := range d.closes {
		c()
	}
	if d.Net != nil {
		d.Net.Close()
	}
}

// Predict scores a data file with a run's models and writes
// predictions.csv: every participant in this process (each party with its
// own connection to the broker, as train runs them) or, with Separate, the
// aggregator alone with the parties elsewhere. Nothing is written unless
// every row was scored.
func Predict(ctx context.Context, cfg PredictConfig) (*Metrics, error) {
	cfg.defaults()
	d, err := Deploy(ctx, DeployConfig{Models: cfg.Models, Data: cfg.Data, Split: cfg.Split, Inputs: cfg.Inputs, Keys: cfg.Keys, Roster: cfg.Roster,
		TrustUnsigned: cfg.TrustUnsigned, Net: cfg.Net, Separate: cfg.Separate, Wait: cfg.Wait, Timeout: cfg.Timeout, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	agg := d.Set.Aggregator
	t1 := time.Now()
	preds, err := scoreAll(ctx, d.Scorer, d.IDs, cfg.Chunk, cfg.Window, cfg.Progress)
	if err != nil {
		return nil, err
	}
	secs := time.Since(t1).Seconds()
	mt := &Metrics{Run: agg.Run, Data: cfg.Data, Rows: len(preds), Parties: agg.Parties, Classes: agg.Out,
		Seconds: secs, PerSecond: float64(len(preds)) / secs, LoadSecond: d.Load.Seconds(), Bus: d.Net.Name,
		Signed: d.Keys.Key(0) != nil, ModelsChecked: d.ModelRoster != nil, Out: cfg.Out, Predictions: preds, IDs: d.IDs, Y: d.Y, Inputs: d.Inputs}
	if cfg.Inputs != nil {
		mt.Data = strings.Join(cfg.Inputs.Paths, ",")
	}
	if d.Y != nil {
		mt.Labelled = true
		mt.Accuracy, mt.AUC, mt.LogLoss = Evaluate(preds, d.Y, agg.Out)
		if math.IsNaN(mt.AUC) { // one class absent
			mt.AUC = 0
		}
	}
	if cfg.Out != "" {
		if err := WritePredictions(cfg.Out, d.Labels, preds, agg.Labels); err != nil {
			return nil, err
		}
		if cfg.Metrics != "" {
			if err := writeJSON(cfg.Metrics, mt); err != nil {
				return nil, err
			}
		}
	}
	return mt, nil
}

// waitParties retries a one-id request until every party answers (or the
// id is unknown: the party is up) or wait has passed. Each try waits at
// most DefaultTimeout, not the batch's timeout: it asks whether the
// parties are there, and a party that is not yet listening misses the
// request for good.
func waitParties(ctx context.Context, sc *Scorer, id string, wait time.Duration, log zerolog.Logger) error {
	deadline := time.Now().Add(wait)
	probe := min(sc.cfg.Timeout, DefaultTimeout)
	for {
		_, err := sc.outputs(ctx, []string{id}, false, probe)
		if err == nil || !errors.Is(err, ErrPartyDown) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting %v for the parties (asyrevel party --serve): %w", wait, err)
		}
		log.Info().Err(err).Msg("waiting for the parties")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// scoreAll scores ids in chunks, window of them in flight.
func scoreAll(ctx context.Context, sc *Scorer, ids []string, chunk, window int, progress func(int, int)) ([]Prediction, error) {
	preds := make([]Prediction, len(ids))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(window)
	done := make(chan int, window)
	var doneN int
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for n := range done {
			doneN += n
			if progress != nil {
				progress(doneN, len(ids))
			}
		}
	}()
	for lo := 0; lo < len(ids); lo += chunk {
		hi := min(lo+chunk, len(ids))
		g.Go(func() error {
			out, err := sc.Outputs(gctx, ids[lo:hi])
			if err != nil {
				return fmt.Errorf("rows %d..%d: %w", lo, hi-1, err)
			}
			sc.Predict(out, preds[lo:lo:hi])
			done <- hi - lo
			return nil
		})
	}
	err := g.Wait()
	close(done)
	<-finished
	return preds, err
}

// Evaluate gives the accuracy, the AUC (binary; macro one-vs-rest for
// more classes) and the log loss of preds against classes y.
func Evaluate(preds []Prediction, y []int32, classes int) (acc, auc, logLoss float64) {
	correct := 0
	scores := make([]float64, 0, len(preds)*classes)
	for i, p := range preds {
		if p.Class == y[i] {
			correct++
		}
		logLoss -= math.Log(max(p.Probs[y[i]], 1e-300))
		scores = append(scores, p.Probs...)
	}
	n := float64(len(preds))
	if classes == 2 {
		pos := make([]bool, len(y))
		s1 := make([]float64, len(y))
		for i := range y {
			pos[i], s1[i] = y[i] == 1, preds[i].Probs[1]
		}
		auc = metric.AUC(s1, pos)
	} else {
		auc = metric.MacroAUC(scores, y, classes)
	}
	return float64(correct) / n, auc, logLoss / n
}

// WritePredictions writes predictions.csv atomically, one line a row of
// rows in the order of the data it was read from: id (the data's id, or,
// for an alignment, the key as the label holder's file writes it, in that
// file's order), label (the true label, in the data's own label values;
// only when the data has labels), predicted (the predicted label) and
// p_<label>, the probability of each class.
func WritePredictions(path string, rows *LabelRows, preds []Prediction, labels *LabelsSpec) error {
	ids, order := rows.IDs, make([]int, len(preds))
	for i := range order {
		order[i] = i
	}
	if rows.Keys != nil {
		ids = rows.Keys
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rows.Source[a], rows.Source[b]) })
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return writeFile(path, 0o600, func(f io.Writer) error {
		w := bufio.NewWriterSize(f, 1<<16)
		w.WriteString("id")
		if rows.Y != nil {
			w.WriteString(",label")
		}
		w.WriteString(",predicted")
		for c := range labels.Classes {
			w.WriteString(",p_")
			w.WriteString(csvField(labels.LabelText(c)))
		}
		w.WriteByte('\n')
		var num []byte
		for _, i := range order {
			p := preds[i]
			w.WriteString(csvField(ids[i]))
			if rows.Y != nil {
				w.WriteByte(',')
				w.WriteString(csvField(labels.LabelText(int(rows.Y[i]))))
			}
			w.WriteByte(',')
			w.WriteString(csvField(labels.LabelText(int(p.Class))))
			for _, v := range p.Probs {
				w.WriteByte(',')
				num = strconv.AppendFloat(num[:0], v, 'g', 10, 64)
				w.Write(num)
			}
			w.WriteByte('\n')
		}
		return w.Flush()
	})
}

// csvField quotes s if CSV needs it.
func csvField(s string) string {
	if strings.ContainsAny(s, ",\"\r\n") {
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
	}
	return s
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(path, 0o644, append(b, '\n'))
}
