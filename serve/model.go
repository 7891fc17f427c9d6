package serve

import (
	"bytes"
	"context"
	"crypto/ed25519"
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

	"github.com/vmihailenco/msgpack/v5"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/trust"
)

// Magic opens every model file; FormatVersion is the version this package
// writes and reads.
const (
	Magic         = "asyrevel-model"
	FormatVersion = 1
)

// Errors of loading and checking model files; callers branch with errors.Is.
var (
	// ErrFormat: not a model file, another version, or a file whose
	// content does not add up (shapes, parameters, NaN).
	ErrFormat = errors.New("serve: not a usable model file")
	// ErrMismatch: model files that do not belong together (another run,
	// other shapes, a party missing) or data that does not fit them.
	ErrMismatch = errors.New("serve: models do not match")
	// ErrSignature: a signature that does not verify, or a signer who is
	// not the participant the file names.
	ErrSignature = errors.New("serve: model signature invalid")
)

// Roles of a model file.
const (
	RoleParty      = "party"
	RoleAggregator = "aggregator"
)

// Model kinds.
const (
	KindLinear       = "linear"
	KindMLP          = "mlp"
	KindExternal     = "external"
	KindLogistic     = "logistic"      // binary head without intercept
	KindLogisticBias = "logistic-bias" // binary head with intercept
	KindSoftmax      = "softmax"       // multiclass head
	KindCodebook     = "codebook"      // a label-free party's k-means codes
	KindEmbed        = "embed"         // the label-free head over codes
)

// maxFileSize bounds a model file (an MLP over 100,000 columns with 128
// hidden units is 100 MB).
const maxFileSize = 1 << 30

// File is one participant's saved model.
type File struct {
	Magic   string `json:"magic"`
	Version int    `json:"version"`
	Run     string `json:"run"`
	Role    string `json:"role"`    // RoleParty or RoleAggregator
	Party   int    `json:"party"`   // 1..Parties for a party, 0 for the aggregator
	Parties int    `json:"parties"` // q
	Algo    string `json:"algo,omitempty"`
	Dataset string `json:"dataset,omitempty"`
	Steps   int64  `json:"steps,omitempty"`

	// Kind is the model's kind (Kind*); In and Out its shapes: a party's
	// d_m and k, the aggregator's q*k and classes. K is the outputs per
	// party. Hidden is the MLP's hidden units.
	Kind   string `json:"kind"`
	In     int    `json:"in"`
	Out    int    `json:"out"`
	K      int    `json:"k"`
	Hidden int    `json:"hidden,omitempty"`
	// Codes is a codebook's codes per output, and the codes each input of
	// an embed head takes; EmbedDim the embed head's width of a code.
	Codes    int       `json:"codes,omitempty"`
	EmbedDim int       `json:"embed_dim,omitempty"`
	Params   []float64 `json:"params"`
	// External names the black-box model's program; scoring starts it.
	External *External `json:"external,omitempty"`

	// Read says how raw rows are read; Columns (a party) which columns
	// are the party's and how they are scaled; Labels (the aggregator)
	// the classes.
	Read    ReadSpec    `json:"read"`
	Columns *Columns    `json:"columns,omitempty"`
	Labels  *LabelsSpec `json:"labels,omitempty"`

	// Signer is the owner's public key, Sig its Ed25519 signature over the
	// file with Sig empty (both empty without keys).
	Signer string `json:"signer,omitempty"`
	Sig    []byte `json:"sig,omitempty"`
}

// External is an external black-box model: its program and arguments
// (model/EXTERNAL.md) and the time limit of one call.
type External struct {
	Argv      []string `json:"argv"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`
}

// ReadSpec is how a data file is read so that new rows become the features
// the model was trained on.
type ReadSpec struct {
	// Format of the training data: libsvm, csv, idx, synthetic or split
	// (a split folder written by asyrevel data split).
	Format string `json:"format"`
	// Features is the width of the full feature set.
	Features int `json:"features"`
	// Preset names the preprocessing recipe the run used, if any.
	Preset string `json:"preset,omitempty"`
	// CSV options and the encoding fitted on the training set (CSV only).
	CSV      *CSVSpec          `json:"csv,omitempty"`
	Encoding *dataset.Encoding `json:"encoding,omitempty"`
}

// CSVSpec is what of dataset.CSVOptions a scoring file is read with.
type CSVSpec struct {
	Comma    int32    `json:"comma,omitempty"`
	SkipRows int      `json:"skip_rows,omitempty"`
	ID       string   `json:"id,omitempty"`
	Label    string   `json:"label,omitempty"`
	Drop     []string `json:"drop,omitempty"`
	NA       []string `json:"na,omitempty"`
	Missing  int      `json:"missing,omitempty"`
}

// Columns are a party's block [Lo, Hi) of the full feature set, their
// names where known, and the scaling fitted on the training set (nil:
// none).
type Columns struct {
	Lo     int             `json:"lo"`
	Hi     int             `json:"hi"`
	Names  []string        `json:"names,omitempty"`
	Scaler *dataset.Scaler `json:"scaler,omitempty"`
}

// LabelsSpec is the aggregator's view of the classes: class c is written
// Values[c] in the data (LIBSVM +1/-1, CSV 0/1, ...), named Names[c] if the
// data names it.
type LabelsSpec struct {
	Classes int       `json:"classes"`
	Values  []float64 `json:"values"`
	Names   []string  `json:"names,omitempty"`
}

// FileName is the name of participant m's model file (0: the aggregator).
func FileName(m int) string {
	if m == 0 {
		return "aggregator.model"
	}
	return "party-" + strconv.Itoa(m) + ".model"
}

// encode writes f as msgpack with its JSON field names.
func (f *File) encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetCustomStructTag("json")
	enc.SetOmitEmpty(false)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// signedBytes is what the signature covers: the file with Sig empty, after
// a domain prefix.
func (f *File) signedBytes() ([]byte, error) {
	g := *f
	g.Sig = nil
	b, err := g.encode()
	if err != nil {
		return nil, err
	}
	return append([]byte(Magic+"\x00sig\x00"), b...), nil
}

// Sign sets Signer and Sig with key.
func (f *File) Sign(key *trust.Key) error {
	f.Magic, f.Version = Magic, FormatVersion
	f.Signer, f.Sig = key.PublicKey(), nil
	b, err := f.signedBytes()
	if err != nil {
		return err
	}
	s := key.Sign(b)
	f.Sig = s[:]
	return nil
}

// Marshal checks f and encodes it.
func (f *File) Marshal() ([]byte, error) {
	f.Magic, f.Version = Magic, FormatVersion
	if err := f.Check(); err != nil {
		return nil, err
	}
	return f.encode()
}

// Write writes f into dir (created if needed) under FileName, atomically:
// a temporary file renamed when complete, so a reader never sees half a
// model.
func (f *File) Write(dir string) (string, error) {
	b, err := f.Marshal()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, FileName(f.Party))
	if err := writeFile(path, 0o600, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}); err != nil {
		return "", err
	}
	return path, nil
}

// Unmarshal decodes and checks a model file: magic, version, shapes,
// finite parameters and, if the file is signed, its signature (against the
// key the file names; CheckSigner ties it to a roster).
func Unmarshal(b []byte) (*File, error) {
	if !bytes.Contains(b[:min(len(b), 64)], []byte(Magic)) {
		return nil, fmt.Errorf("%w: no %q magic at the start", ErrFormat, Magic)
	}
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	dec.SetCustomStructTag("json")
	dec.DisallowUnknownFields(true)
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if f.Magic != Magic {
		return nil, fmt.Errorf("%w: magic %q, want %q", ErrFormat, f.Magic, Magic)
	}
	if f.Version != FormatVersion {
		return nil, fmt.Errorf("%w: format version %d, this asyrevel reads version %d", ErrFormat, f.Version, FormatVersion)
	}
	if err := f.Check(); err != nil {
		return nil, err
	}
	if f.Signer != "" || len(f.Sig) > 0 {
		pub, err := trust.ParsePublicKey(f.Signer)
		if err != nil {
			return nil, fmt.Errorf("%w: signer %q: %w", ErrSignature, f.Signer, err)
		}
		sb, err := f.signedBytes()
		if err != nil {
			return nil, err
		}
		if len(f.Sig) != ed25519.SignatureSize || !ed25519.Verify(pub, sb, f.Sig) {
			return nil, fmt.Errorf("%w: %s of run %s: the signature by %s does not verify (the file was changed after it was signed)", ErrSignature, FileName(f.Party), f.Run, f.Signer)
		}
	}
	return &f, nil
}

// Load reads one model file.
func Load(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("%s: %w: larger than %d bytes", path, ErrFormat, maxFileSize)
	}
	f, err := Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// numParams is the parameter count of a model of f's kind and shapes.
func (f *File) numParams() (int, error) {
	switch f.Kind {
	case KindLinear:
		return f.In * f.Out, nil
	case KindMLP:
		if f.Hidden < 1 {
			return 0, fmt.Errorf("%w: mlp with %d hidden units", ErrFormat, f.Hidden)
		}
		return model.NewMLP(f.In, f.Hidden, f.Out).NumParams(), nil
	case KindExternal:
		return len(f.Params), nil
	case KindLogistic:
		return 0, nil
	case KindLogisticBias:
		return 1, nil
	case KindSoftmax:
		return f.Out*f.In + f.Out, nil
	case KindCodebook:
		if f.Codes < 1 || f.Codes > 1<<16 || f.Out > f.In {
			return 0, fmt.Errorf("%w: codebook of %d codes for %d outputs of %d columns", ErrFormat, f.Codes, f.Out, f.In)
		}
		return f.Codes * f.In, nil
	case KindEmbed:
		if f.Codes < 1 || f.Codes > 1<<16 || f.EmbedDim < 1 || f.EmbedDim > 1<<10 || f.Hidden < 0 || f.Hidden > 1<<14 || f.In > 1<<16 {
			return 0, fmt.Errorf("%w: embed head of %d inputs of %d codes, width %d, %d hidden units", ErrFormat, f.In, f.Codes, f.EmbedDim, f.Hidden)
		}
		// Counted, not built: a head of these shapes holds scratch space
		// of In*EmbedDim values, which a hostile file must not make us
		// allocate before its parameters are seen to match.
		in, codes, dim, hidden, out := int64(f.In), int64(f.Codes), int64(f.EmbedDim), int64(f.Hidden), int64(f.Out)
		width := in * dim
		if hidden > 0 {
			width = hidden
		}
		n := in*codes*dim + out*width + out
		if hidden > 0 {
			n += hidden*in*dim + hidden
		}
		if n > 1<<31 {
			return 0, fmt.Errorf("%w: an embed head of %d parameters", ErrFormat, n)
		}
		return int(n), nil
	}
	return 0, fmt.Errorf("%w: unknown model kind %q", ErrFormat, f.Kind)
}

// Check checks that f adds up: role and ids, shapes, parameters.
func (f *File) Check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrFormat, FileName(f.Party), fmt.Sprintf(format, a...))
	}
	if f.Run == "" {
		return bad("no run id")
	}
	if f.Parties < 1 || f.Parties > 1024 {
		return bad("%d parties", f.Parties)
	}
	if f.In < 1 || f.Out < 1 || f.K < 1 || f.In > 1<<28 || f.Out > 1<<20 {
		return bad("shapes in %d, out %d, k %d", f.In, f.Out, f.K)
	}
	switch f.Role {
	case RoleParty:
		if f.Party < 1 || f.Party > f.Parties {
			return bad("party %d of %d", f.Party, f.Parties)
		}
		if !slices.Contains([]string{KindLinear, KindMLP, KindExternal, KindCodebook}, f.Kind) {
			return bad("a party's model cannot be %q", f.Kind)
		}
		if f.Out != f.K {
			return bad("%d outputs, k is %d", f.Out, f.K)
		}
		c := f.Columns
		if c == nil || c.Lo < 0 || c.Hi-c.Lo != f.In || c.Hi > f.Read.Features {
			return bad("columns do not match the model's %d inputs of %d features", f.In, f.Read.Features)
		}
		if c.Scaler != nil && (len(c.Scaler.Shift) != f.In || len(c.Scaler.Factor) != f.In) {
			return bad("scaling for %d columns, the model has %d", len(c.Scaler.Factor), f.In)
		}
		if f.Kind == KindExternal && (f.External == nil || len(f.External.Argv) == 0) {
			return bad("an external model without a program")
		}
	case RoleAggregator:
		if f.Party != 0 {
			return bad("the aggregator is participant 0, not %d", f.Party)
		}
		if !slices.Contains([]string{KindLogistic, KindLogisticBias, KindSoftmax, KindEmbed}, f.Kind) {
			return bad("the aggregator's head cannot be %q", f.Kind)
		}
		if f.In != f.Parties*f.K {
			return bad("head over %d inputs, %d parties of %d outputs", f.In, f.Parties, f.K)
		}
		l := f.Labels
		if l == nil || l.Classes < 2 || l.Classes != f.Out || len(l.Values) != l.Classes || (len(l.Names) > 0 && len(l.Names) != l.Classes) {
			return bad("classes do not match the head's %d", f.Out)
		}
		if f.Kind != KindSoftmax && f.Kind != KindEmbed && f.Out != 2 {
			return bad("a logistic head has 2 classes, not %d", f.Out)
		}
	default:
		return bad("role %q", f.Role)
	}
	n, err := f.numParams()
	if err != nil {
		return err
	}
	if len(f.Params) != n {
		return bad("%d parameters, a %s model of these shapes has %d", len(f.Params), f.Kind, n)
	}
	for i, v := range f.Params {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return bad("parameter %d is %v", i, v)
		}
	}
	if f.Columns != nil && f.Columns.Scaler != nil {
		for j := range f.Columns.Scaler.Factor {
			if s, v := f.Columns.Scaler.Shift[j], f.Columns.Scaler.Factor[j]; math.IsNaN(s+v) || math.IsInf(s+v, 0) {
				return bad("scaling of column %d is not finite", j)
			}
		}
	}
	if f.Read.Encoding != nil && f.Read.Encoding.Features() != f.Read.Features {
		return bad("encoding of %d features, the data has %d", f.Read.Encoding.Features(), f.Read.Features)
	}
	return nil
}

// CheckSigner ties f to roster r: same run, and signed by the participant
// the file names.
func (f *File) CheckSigner(r *trust.Roster) error {
	if r == nil {
		return nil
	}
	if r.Run != f.Run {
		return fmt.Errorf("%w: %s is run %s's, the roster run %s's", ErrMismatch, FileName(f.Party), f.Run, r.Run)
	}
	id := trust.AggregatorID
	if f.Party > 0 {
		id = trust.PartyID(f.Party)
	}
	p, ok := r.Participant(id)
	if !ok {
		return fmt.Errorf("%w: the roster has no %s", ErrMismatch, id)
	}
	if f.Signer == "" {
		return fmt.Errorf("%w: %s is not signed, and the run has keys", ErrSignature, FileName(f.Party))
	}
	if f.Signer != p.PublicKey {
		return fmt.Errorf("%w: %s is signed by %s, the roster's %s is %s", ErrSignature, FileName(f.Party), f.Signer, id, p.PublicKey)
	}
	return nil
}

// Set is the model files of every participant of a run, checked together.
type Set struct {
	Aggregator *File
	Parties    []*File // Parties[m-1] is party m's
}

// LoadSet reads every model file of dir (aggregator.model and party-1..q)
// and checks that they belong together; with a roster, that each is signed
// by its owner.
func LoadSet(dir string, r *trust.Roster) (*Set, error) {
	agg, err := Load(filepath.Join(dir, FileName(0)))
	if err != nil {
		return nil, err
	}
	s := &Set{Aggregator: agg, Parties: make([]*File, agg.Parties)}
	for m := 1; m <= agg.Parties; m++ {
		if s.Parties[m-1], err = Load(filepath.Join(dir, FileName(m))); err != nil {
			return nil, err
		}
	}
	if extra, _ := filepath.Glob(filepath.Join(dir, "party-*.model")); len(extra) > agg.Parties {
		return nil, fmt.Errorf("%w: %s holds %d party models, the aggregator's model is for %d parties", ErrMismatch, dir, len(extra), agg.Parties)
	}
	for _, f := range append([]*File{agg}, s.Parties...) {
		if err := f.CheckSigner(r); err != nil {
			return nil, err
		}
	}
	return s, s.Check()
}

// Check checks that the files of s belong to one run and fit together.
func (s *Set) Check() error {
	a := s.Aggregator
	for m, p := range s.Parties {
		name := FileName(m + 1)
		switch {
		case p.Role != RoleParty || p.Party != m+1:
			return fmt.Errorf("%w: %s holds participant %d's model (%s)", ErrMismatch, name, p.Party, p.Role)
		case p.Run != a.Run:
			return fmt.Errorf("%w: %s is from run %s, aggregator.model from run %s", ErrMismatch, name, p.Run, a.Run)
		case p.Parties != a.Parties:
			return fmt.Errorf("%w: %s is for %d parties, aggregator.model for %d", ErrMismatch, name, p.Parties, a.Parties)
		case p.K != a.K:
			return fmt.Errorf("%w: %s gives %d outputs a sample, the aggregator's head takes %d a party", ErrMismatch, name, p.K, a.K)
		case p.Read.Features != a.Read.Features || p.Read.Format != a.Read.Format:
			return fmt.Errorf("%w: %s was trained on %d %s features, aggregator.model on %d %s", ErrMismatch, name, p.Read.Features, p.Read.Format, a.Read.Features, a.Read.Format)
		}
		if m > 0 && p.Columns.Lo != s.Parties[m-1].Columns.Hi {
			return fmt.Errorf("%w: %s's columns start at %d, party %d's end at %d", ErrMismatch, name, p.Columns.Lo, m, s.Parties[m-1].Columns.Hi)
		}
	}
	if last := s.Parties[len(s.Parties)-1]; last.Columns.Hi != a.Read.Features || s.Parties[0].Columns.Lo != 0 {
		return fmt.Errorf("%w: the parties' columns do not cover the %d features", ErrMismatch, a.Read.Features)
	}
	return nil
}

// Head builds the aggregator's head model.
func (f *File) Head() (model.Head, error) {
	switch f.Kind {
	case KindLogistic:
		return model.NewLogistic(f.Parties), nil
	case KindLogisticBias:
		return model.NewLogisticBias(f.Parties), nil
	case KindSoftmax:
		return model.NewSoftmax(f.In, f.Out), nil
	case KindEmbed:
		return model.NewEmbed(f.In, f.Codes, f.EmbedDim, f.Hidden, f.Out), nil
	}
	return nil, fmt.Errorf("%w: %q is not a head", ErrFormat, f.Kind)
}

// LabelText is how class c is written in the data (LIBSVM "+1" and "-1"
// are written "1" and "-1").
func (l *LabelsSpec) LabelText(c int) string {
	if len(l.Names) > 0 && l.Names[c] != "" {
		return l.Names[c]
	}
	return strconv.FormatFloat(l.Values[c], 'g', -1, 64)
}

// String describes f for logs.
func (f *File) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s of run %s: %s %dx%d", FileName(f.Party), f.Run, f.Kind, f.In, f.Out)
	if f.Signer != "" {
		fmt.Fprintf(&b, ", signed by %s", f.Signer)
	}
	return b.String()
}

// Local builds a party's model from f. For an external model it starts the
// model's program; close releases it (a no-op for the others).
func (f *File) Local(ctx context.Context) (local model.Local, close func() error, err error) {
	if f.Role != RoleParty {
		return nil, nil, fmt.Errorf("%w: %s is not a party's model", ErrMismatch, FileName(f.Party))
	}
	switch f.Kind {
	case KindLinear:
		return model.NewLinear(f.In, f.Out), func() error { return nil }, nil
	case KindMLP:
		return model.NewMLP(f.In, f.Hidden, f.Out), func() error { return nil }, nil
	case KindCodebook:
		return model.NewCodebook(f.In, f.Out, f.Codes), func() error { return nil }, nil
	}
	ext, err := model.StartExternal(ctx, f.External.Argv, f.In, model.ExternalOptions{
		OutDim: f.Out, Timeout: time.Duration(f.External.TimeoutMS) * time.Millisecond,
		StderrPrefix: fmt.Sprintf("[party %d model] ", f.Party),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("party %d's external model %q: %w", f.Party, strings.Join(f.External.Argv, " "), err)
	}
	if ext.NumParams() != len(f.Params) {
		ext.Close()
		return nil, nil, fmt.Errorf("%w: party %d's external model has %d parameters, the file %d", ErrMismatch, f.Party, ext.NumParams(), len(f.Params))
	}
	return ext, ext.Close, nil
}
