package dataset

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/asyrevel/asyrevel/internal/atomicfile"
)

// Split file names inside a split folder.
const (
	ManifestFile = "manifest.json"
	partyPrefix  = "#asyrevel-party "
	labelsPrefix = "#asyrevel-labels "
	splitVersion = 1
)

// PartyFileName is the name of party m's (1-based) file for a split
// ("train" or "test"): party-M.SPLIT.gz.
func PartyFileName(m int, split string) string {
	return fmt.Sprintf("party-%d.%s.gz", m, split)
}

// LabelsFileName is the name of the labels file of a split: labels.SPLIT.gz.
func LabelsFileName(split string) string { return "labels." + split + ".gz" }

// PartyHeader is the header of a party file.
type PartyHeader struct {
	Version  int      `json:"version"`
	Split    string   `json:"split"`   // "train" or "test"
	Party    int      `json:"party"`   // 1..Parties
	Parties  int      `json:"parties"` // q
	Lo       int      `json:"lo"`      // the party's columns are [Lo, Hi) of the full feature set
	Hi       int      `json:"hi"`
	Features int      `json:"features"` // width of the full feature set
	Samples  int      `json:"samples"`
	Names    []string `json:"names,omitempty"` // names of the party's columns, if known
}

// LabelsHeader is the header of a labels file.
type LabelsHeader struct {
	Version     int       `json:"version"`
	Split       string    `json:"split"`
	Samples     int       `json:"samples"`
	LabelValues []float64 `json:"label_values"` // class c is written as LabelValues[c]
}

// PartyData is what one party holds: its columns of every sample, keyed by
// sample id. X has one row per id and the party's columns, re-indexed from
// 0 (column j is column Lo+j of the full feature set).
type PartyData struct {
	PartyHeader
	IDs []string
	X   *Matrix
}

// Block is the party's column range in the full feature set.
func (p *PartyData) Block() Block { return Block{Lo: p.Lo, Hi: p.Hi} }

// Labels is what the aggregator holds: the label of every sample, keyed by
// sample id.
type Labels struct {
	LabelsHeader
	IDs     []string
	Y       []int32 // class indices, 0..Classes-1
	Classes int
}

// SplitManifest describes a split folder: what was split and how, and
// every file with its size and SHA-256, so that a user (or Verify) can
// check what was written.
type SplitManifest struct {
	Format      string          `json:"format"` // "asyrevel-split"
	Version     int             `json:"version"`
	Q           int             `json:"q"`
	Features    int             `json:"features"`
	Classes     int             `json:"classes"`
	LabelValues []float64       `json:"label_values"`
	Blocks      []Block         `json:"blocks"`
	Sets        []SplitSet      `json:"sets"`
	Files       []ManifestEntry `json:"files"`
	Source      SplitSource     `json:"source"`
}

// SplitSet counts the samples of one split.
type SplitSet struct {
	Split       string `json:"split"`
	Samples     int    `json:"samples"`
	ClassCounts []int  `json:"class_counts"`
}

// ManifestEntry is one file of a split folder.
type ManifestEntry struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"` // "party" or "labels"
	Split   string `json:"split"`
	Party   int    `json:"party,omitempty"`
	Samples int    `json:"samples"`
	Columns int    `json:"columns,omitempty"`
	NNZ     int    `json:"nnz,omitempty"`
	Bytes   int64  `json:"bytes"`
	SHA256  string `json:"sha256"`
}

// SplitSource records where the data came from; free-form, for people.
type SplitSource struct {
	Train  string `json:"train,omitempty"`
	Test   string `json:"test,omitempty"`
	Preset string `json:"preset,omitempty"`
	Scale  string `json:"scale,omitempty"`
}

// WriteSplit splits train (and test, if not nil) into q parties with
// VerticalSplit and writes into dir, created if needed: one party file per
// party and set, one labels file per set (see below) and
// ManifestFile. Each file is written under a temporary name and renamed
// when complete, the manifest last, so a folder with a manifest is
// complete. Existing files of the same names are replaced. The test set
// must have the training set's columns and classes (ErrMismatch). Sample
// ids that cannot be written (empty, white space, '#') or repeat are an
// error wrapping ErrFormat.
//
// The party and labels files are gzip-compressed text (LoadPartyFile and
// LoadLabels read them plain too); the manifest is JSON.
//
// A party file starts with a header line, "#asyrevel-party " and a JSON
// object (PartyHeader), then holds one line per sample: the sample id, then
// index:value pairs with 1-based, strictly increasing indices into the
// party's own columns (LIBSVM with the id in place of the label):
//
//	#asyrevel-party {"version":1,"split":"train","party":2,"parties":4,"lo":23,"hi":46,"features":90,"samples":24000,"names":[...]}
//	6001 1:-0.3 4:1.2
//
// A labels file starts with "#asyrevel-labels " and a JSON object
// (LabelsHeader), then holds one line per sample: the id and the label as
// in the source file (+1/-1, 0/1, a digit):
//
//	#asyrevel-labels {"version":1,"split":"train","samples":24000,"label_values":[0,1]}
//	6001 1
//
// Sample ids are non-empty and hold no white space and no '#'; every file
// of a split lists the samples in the same order, which Align checks.
func WriteSplit(dir string, q int, train, test *Dataset, source SplitSource) (*SplitManifest, error) {
	blocks, err := Blocks(train.X.NCols, q)
	if err != nil {
		return nil, err
	}
	return WriteSplitBlocks(dir, blocks, train, test, source)
}

// WriteSplitBlocks is WriteSplit with the parties' column blocks given:
// contiguous, non-empty, in order, covering every column (private entity
// alignment joins parties whose widths differ).
func WriteSplitBlocks(dir string, blocks []Block, train, test *Dataset, source SplitSource) (*SplitManifest, error) {
	q := len(blocks)
	lo := 0
	for m, b := range blocks {
		if b.Lo != lo || b.Hi <= b.Lo {
			return nil, fmt.Errorf("%w: block %d [%d,%d) does not continue at column %d", ErrMismatch, m+1, b.Lo, b.Hi, lo)
		}
		lo = b.Hi
	}
	if q == 0 || lo != train.X.NCols {
		return nil, fmt.Errorf("%w: %d blocks cover %d of %d columns", ErrMismatch, q, lo, train.X.NCols)
	}
	sets := []*Dataset{train}
	names := []string{"train"}
	if test != nil {
		if test.X.NCols != train.X.NCols || !slices.Equal(test.LabelValues, train.LabelValues) {
			return nil, fmt.Errorf("%w: test set has %d columns and labels %v, training set %d and %v",
				ErrMismatch, test.X.NCols, test.LabelValues, train.X.NCols, train.LabelValues)
		}
		sets, names = append(sets, test), append(names, "test")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	man := &SplitManifest{
		Format: "asyrevel-split", Version: splitVersion, Q: q,
		Features: train.X.NCols, Classes: train.Classes, LabelValues: train.LabelValues,
		Blocks: blocks, Source: source,
	}
	featureNames := train.FeatureNames()
	for k, d := range sets {
		split := names[k]
		if err := checkIDs(d); err != nil {
			return nil, fmt.Errorf("%s set: %w", split, err)
		}
		man.Sets = append(man.Sets, SplitSet{Split: split, Samples: d.Len(), ClassCounts: countClasses(d)})
		e, err := writeFileAtomic(dir, LabelsFileName(split), func(w io.Writer) error { return writeLabels(w, d, split) })
		if err != nil {
			return nil, err
		}
		e.Kind, e.Split, e.Samples = "labels", split, d.Len()
		man.Files = append(man.Files, e)
		for m, b := range blocks {
			x := d.X.Columns(b.Lo, b.Hi)
			h := PartyHeader{Version: splitVersion, Split: split, Party: m + 1, Parties: q,
				Lo: b.Lo, Hi: b.Hi, Features: d.X.NCols, Samples: d.Len()}
			if featureNames != nil {
				h.Names = featureNames[b.Lo:b.Hi]
			}
			e, err := writeFileAtomic(dir, PartyFileName(m+1, split), func(w io.Writer) error { return writeParty(w, h, d, x) })
			if err != nil {
				return nil, err
			}
			e.Kind, e.Split, e.Party, e.Samples, e.Columns, e.NNZ = "party", split, m+1, d.Len(), b.Len(), x.NNZ()
			man.Files = append(man.Files, e)
		}
	}
	js, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("dataset: manifest: %w", err)
	}
	if _, err := writeFileAtomic(dir, ManifestFile, func(w io.Writer) error {
		_, err := w.Write(append(js, '\n'))
		return err
	}); err != nil {
		return nil, err
	}
	return man, nil
}

// countClasses counts the samples of each class.
func countClasses(d *Dataset) []int {
	counts := make([]int, d.Classes)
	for _, y := range d.Y {
		if int(y) < len(counts) {
			counts[y]++
		}
	}
	return counts
}

// checkIDs checks that d's ids can be written and do not repeat.
func checkIDs(d *Dataset) error {
	seen := make(map[string]int, d.Len())
	for i := range d.Len() {
		id := d.ID(i)
		if err := checkID(id); err != nil {
			return fmt.Errorf("sample %d: %w", i+1, err)
		}
		if j, dup := seen[id]; dup {
			return fmt.Errorf("%w: samples %d and %d have the same id %s", ErrFormat, j+1, i+1, strconv.Quote(id))
		}
		seen[id] = i
	}
	return nil
}

// checkID checks that an id can be written as one token.
func checkID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty sample id", ErrFormat)
	}
	for _, c := range []byte(id) {
		if c <= ' ' || c == '#' || c == 0x7f {
			return fmt.Errorf("%w: sample id %s has white space, a control character or '#'", ErrFormat, strconv.Quote(id))
		}
	}
	return nil
}

// writeFileAtomic writes dir/name through a gzip writer if the name ends in
// .gz, under a temporary name renamed on success (atomicfile.Write), and
// returns its size and SHA-256.
func writeFileAtomic(dir, name string, write func(io.Writer) error) (ManifestEntry, error) {
	e := ManifestEntry{Name: name}
	h := sha256.New()
	var cw *countWriter
	err := atomicfile.Write(filepath.Join(dir, name), 0o644, func(f io.Writer) error {
		cw = &countWriter{w: io.MultiWriter(f, h)}
		bw := bufio.NewWriterSize(cw, 256<<10)
		var w io.Writer = bw
		var gz *gzip.Writer
		if filepath.Ext(name) == ".gz" {
			gz, _ = gzip.NewWriterLevel(bw, gzip.BestSpeed)
			w = gz
		}
		if err := write(w); err != nil {
			return err
		}
		if gz != nil {
			if err := gz.Close(); err != nil {
				return err
			}
		}
		return bw.Flush()
	})
	if err != nil {
		return e, fmt.Errorf("dataset: write %s: %w", name, err)
	}
	e.Bytes, e.SHA256 = cw.n, hex.EncodeToString(h.Sum(nil))
	return e, nil
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeParty writes a party file: header, then one line per sample.
func writeParty(w io.Writer, h PartyHeader, d *Dataset, x *Matrix) error {
	js, err := json.Marshal(h)
	if err != nil {
		return err
	}
	buf := append([]byte(partyPrefix), js...)
	buf = append(buf, '\n')
	for i := range x.NRows {
		buf = append(buf, d.ID(i)...)
		idx, val := x.Row(i)
		for k, j := range idx {
			buf = append(buf, ' ')
			buf = strconv.AppendInt(buf, int64(j)+1, 10)
			buf = append(buf, ':')
			buf = strconv.AppendFloat(buf, float64(val[k]), 'g', -1, 32)
		}
		buf = append(buf, '\n')
		if len(buf) >= 64<<10 {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	_, err = w.Write(buf)
	return err
}

// writeLabels writes a labels file.
func writeLabels(w io.Writer, d *Dataset, split string) error {
	if d.LabelValues == nil || len(d.LabelValues) < d.Classes {
		return fmt.Errorf("%w: %d label values for %d classes", ErrMismatch, len(d.LabelValues), d.Classes)
	}
	js, err := json.Marshal(LabelsHeader{Version: splitVersion, Split: split, Samples: d.Len(), LabelValues: d.LabelValues})
	if err != nil {
		return err
	}
	text := make([]string, len(d.LabelValues))
	for c := range text {
		text[c] = labelText(d.LabelValues, c)
	}
	buf := append([]byte(labelsPrefix), js...)
	buf = append(buf, '\n')
	for i, y := range d.Y {
		if y < 0 || int(y) >= len(text) {
			return fmt.Errorf("%w: sample %d has class %d", ErrMismatch, i+1, y)
		}
		buf = append(buf, d.ID(i)...)
		buf = append(buf, ' ')
		buf = append(buf, text[y]...)
		buf = append(buf, '\n')
		if len(buf) >= 64<<10 {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	_, err = w.Write(buf)
	return err
}

// openText opens a possibly gzip-compressed file for reading.
func openText(path string) (*source, error) {
	src, err := openSource(path)
	if err != nil {
		return nil, err
	}
	if src.dir {
		return nil, fmt.Errorf("%s: %w: a folder, not a file", path, ErrUnknownFormat)
	}
	return src, nil
}

// LoadPartyFile reads a party file (see WriteSplit), plain or gzip.
func LoadPartyFile(path string) (*PartyData, error) { return loadText(path, ReadPartyFile) }

// loadText opens the text file at path, plain or gzip, and reads it with
// read; read's errors are prefixed with path.
func loadText[T any](path string, read func(io.Reader) (T, error)) (T, error) {
	var zero T
	src, err := openText(path)
	if err != nil {
		return zero, err
	}
	defer src.Close()
	v, err := read(src.r)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// ReadPartyFile reads a party file from r. The header must be valid
// (version 1, 1 <= party <= parties, 0 <= lo <= hi <= features) and the
// file must hold header.samples lines, each an id and index:value pairs
// within the party's hi-lo columns. Errors wrap ErrFormat and name the line.
func ReadPartyFile(r io.Reader) (*PartyData, error) {
	lr := lineReader{br: bufio.NewReaderSize(r, readBufferSize)}
	var h PartyHeader
	if err := readHeader(&lr, partyPrefix, &h); err != nil {
		return nil, err
	}
	if h.Version != splitVersion || h.Parties < 1 || h.Party < 1 || h.Party > h.Parties ||
		h.Lo < 0 || h.Hi < h.Lo || h.Features < h.Hi || h.Features > math.MaxInt32 || h.Samples < 0 ||
		(h.Names != nil && len(h.Names) != h.Hi-h.Lo) {
		return nil, fmt.Errorf("%w: party file: line 1: inconsistent header %+v", ErrFormat, h)
	}
	cols := h.Hi - h.Lo
	p := &PartyData{PartyHeader: h, IDs: make([]string, 0, min(h.Samples, 1<<16))}
	indptr := make([]int64, 1, min(h.Samples, 1<<16)+1)
	var indices []int32
	var values []float32
	for {
		line, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("dataset: party file: line %d: %w", lr.n+1, err)
		}
		id, rest, err := splitID(line)
		if err != nil {
			return nil, fmt.Errorf("party file: line %d: %w", lr.n, err)
		}
		if len(p.IDs) == h.Samples {
			return nil, fmt.Errorf("%w: party file: line %d: more samples than the header's %d", ErrFormat, lr.n, h.Samples)
		}
		p.IDs = append(p.IDs, id)
		prev := 0
		for len(rest) > 0 {
			var tok []byte
			tok, rest = nextToken(rest)
			if tok == nil {
				break
			}
			c := bytes.IndexByte(tok, ':')
			j, ok := 0, c > 0
			if ok {
				j, ok = parseIndex(tok[:c])
			}
			if !ok || j > cols || j <= prev {
				return nil, fmt.Errorf("%w: party file: line %d: token %s: want index:value with increasing indices in [1, %d]", ErrFormat, lr.n, quote(tok), cols)
			}
			v, ok := parseValue(tok[c+1:])
			if !ok {
				return nil, fmt.Errorf("%w: party file: line %d: token %s: value is not a finite float32", ErrFormat, lr.n, quote(tok))
			}
			prev = j
			if v != 0 {
				indices = append(indices, int32(j-1))
				values = append(values, v)
			}
		}
		indptr = append(indptr, int64(len(indices)))
	}
	if len(p.IDs) != h.Samples {
		return nil, fmt.Errorf("%w: party file: %d samples, the header says %d (truncated?)", ErrFormat, len(p.IDs), h.Samples)
	}
	p.X = &Matrix{NRows: len(p.IDs), NCols: cols, Indptr: slices.Clip(indptr), Indices: slices.Clip(indices), Values: slices.Clip(values)}
	return p, nil
}

// LoadLabels reads a labels file (see WriteSplit), plain or gzip.
func LoadLabels(path string) (*Labels, error) { return loadText(path, ReadLabels) }

// ReadLabels reads a labels file from r: the header, then header.samples
// lines of an id and a label, which must be one of the header's
// label_values. Errors wrap ErrFormat and name the line.
func ReadLabels(r io.Reader) (*Labels, error) {
	lr := lineReader{br: bufio.NewReaderSize(r, readBufferSize)}
	var h LabelsHeader
	if err := readHeader(&lr, labelsPrefix, &h); err != nil {
		return nil, err
	}
	classOf := make(map[float64]int32, len(h.LabelValues))
	for c, v := range h.LabelValues {
		if _, dup := classOf[v]; dup {
			return nil, fmt.Errorf("%w: labels file: line 1: label value %v given twice", ErrFormat, v)
		}
		classOf[v] = int32(c)
	}
	if h.Version != splitVersion || h.Samples < 0 || len(h.LabelValues) == 0 {
		return nil, fmt.Errorf("%w: labels file: line 1: inconsistent header %+v", ErrFormat, h)
	}
	l := &Labels{LabelsHeader: h, Classes: len(h.LabelValues),
		IDs: make([]string, 0, min(h.Samples, 1<<16)), Y: make([]int32, 0, min(h.Samples, 1<<16))}
	for {
		line, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("dataset: labels file: line %d: %w", lr.n+1, err)
		}
		id, rest, err := splitID(line)
		if err != nil {
			return nil, fmt.Errorf("labels file: line %d: %w", lr.n, err)
		}
		tok, rest := nextToken(rest)
		if extra, _ := nextToken(rest); tok == nil || extra != nil {
			return nil, fmt.Errorf("%w: labels file: line %d: want an id and one label", ErrFormat, lr.n)
		}
		v, ok := parseFloat(tok, 64)
		c, known := classOf[v]
		if !ok || !known {
			return nil, fmt.Errorf("%w: labels file: line %d: label %s is not one of %v", ErrFormat, lr.n, quote(tok), h.LabelValues)
		}
		if len(l.IDs) == h.Samples {
			return nil, fmt.Errorf("%w: labels file: line %d: more samples than the header's %d", ErrFormat, lr.n, h.Samples)
		}
		l.IDs, l.Y = append(l.IDs, id), append(l.Y, c)
	}
	if len(l.IDs) != h.Samples {
		return nil, fmt.Errorf("%w: labels file: %d samples, the header says %d (truncated?)", ErrFormat, len(l.IDs), h.Samples)
	}
	return l, nil
}

// readHeader reads the first line, prefix then a JSON object, into v.
func readHeader(lr *lineReader, prefix string, v any) error {
	what := prefix[1 : len(prefix)-1]
	line, err := lr.next()
	if err == io.EOF {
		return fmt.Errorf("%w: %s: empty file", ErrFormat, what)
	}
	if err != nil {
		return fmt.Errorf("dataset: %s: line 1: %w", what, err)
	}
	js, ok := bytes.CutPrefix(line, []byte(prefix))
	if !ok {
		return fmt.Errorf("%w: %s: line 1 does not start with %q", ErrFormat, what, prefix)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: line 1: header: %w", ErrFormat, what, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: %s: line 1: data after the header object", ErrFormat, what)
	}
	return nil
}

// nextToken returns the first space-separated token of b and the rest;
// tok is nil if b holds only spaces.
func nextToken(b []byte) (tok, rest []byte) {
	i := 0
	for i < len(b) && space[b[i]] {
		i++
	}
	if i == len(b) {
		return nil, nil
	}
	j := i
	for j < len(b) && !space[b[j]] {
		j++
	}
	return b[i:j], b[j:]
}

// splitID returns the id at the start of a sample line and the rest.
func splitID(line []byte) (string, []byte, error) {
	if len(line) == 0 || space[line[0]] {
		return "", nil, fmt.Errorf("%w: a sample line must start with its id", ErrFormat)
	}
	tok, rest := nextToken(line)
	id := string(tok)
	if err := checkID(id); err != nil {
		return "", nil, err
	}
	return id, rest, nil
}

// Align checks that the labels and the party files describe the same
// samples in the same order, of the same split, and that the parties are
// distinct members of one partition of the same feature set. The first
// difference is an error wrapping ErrMismatch that names it: for ids, the
// position (1-based) and both ids.
func Align(labels *Labels, parties ...*PartyData) error {
	seen := map[int]bool{}
	for k, p := range parties {
		who := fmt.Sprintf("party %d", p.Party)
		if labels != nil && p.Split != labels.Split {
			return fmt.Errorf("%w: %s holds the %s set, the labels the %s set", ErrMismatch, who, p.Split, labels.Split)
		}
		if k > 0 {
			q := parties[0]
			if p.Split != q.Split || p.Parties != q.Parties || p.Features != q.Features {
				return fmt.Errorf("%w: %s (%s set, %d parties, %d features) and party %d (%s set, %d parties, %d features) are not from one split",
					ErrMismatch, who, p.Split, p.Parties, p.Features, q.Party, q.Split, q.Parties, q.Features)
			}
			if err := alignIDs(q.IDs, p.IDs, fmt.Sprintf("party %d", q.Party), who); err != nil {
				return err
			}
		}
		if seen[p.Party] {
			return fmt.Errorf("%w: party %d given twice", ErrMismatch, p.Party)
		}
		seen[p.Party] = true
		if labels != nil {
			if err := alignIDs(labels.IDs, p.IDs, "labels", who); err != nil {
				return err
			}
		}
	}
	return nil
}

// alignIDs compares two id lists.
func alignIDs(a, b []string, aName, bName string) error {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Errorf("%w: sample %d is %s in the %s but %s in the %s", ErrMismatch, i+1, strconv.Quote(a[i]), aName, strconv.Quote(b[i]), bName)
		}
	}
	if len(a) != len(b) {
		return fmt.Errorf("%w: the %s list %d samples, the %s %d", ErrMismatch, aName, len(a), bName, len(b))
	}
	return nil
}

// ReadManifest reads dir's ManifestFile.
func ReadManifest(dir string) (*SplitManifest, error) {
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	var m SplitManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", filepath.Join(dir, ManifestFile), ErrFormat, err)
	}
	if m.Format != "asyrevel-split" || m.Version != splitVersion {
		return nil, fmt.Errorf("%s: %w: format %q version %d, want asyrevel-split 1", filepath.Join(dir, ManifestFile), ErrFormat, m.Format, m.Version)
	}
	return &m, nil
}

// Verify checks every file the manifest lists in dir: its size and SHA-256.
// The first difference is an error wrapping ErrChecksum (or the error of
// a missing file).
func (m *SplitManifest) Verify(dir string) error {
	var errs []error
	for _, e := range m.Files {
		if err := e.Verify(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Verify checks the size and SHA-256 of the entry's file in dir: a
// difference is an error wrapping ErrChecksum. A process that reads only
// some files of a split (a party has only its own) checks only those.
func (e ManifestEntry) Verify(dir string) error {
	if e.Name != filepath.Base(e.Name) {
		return fmt.Errorf("%w: manifest file name %q is not a plain name", ErrFormat, e.Name)
	}
	sum, n, err := fileSHA256(filepath.Join(dir, e.Name))
	if err != nil {
		return err
	}
	if n != e.Bytes || sum != e.SHA256 {
		return fmt.Errorf("%w: %s: %d bytes, sha256 %s; the manifest says %d bytes, %s", ErrChecksum, e.Name, n, sum, e.Bytes, e.SHA256)
	}
	return nil
}

// fileSHA256 hashes a file.
func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("dataset: %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// File returns the entry of the manifest for a party (m >= 1) or, with m
// = 0, the labels file of a split; ok is false if there is none.
func (m *SplitManifest) File(split string, party int) (e ManifestEntry, ok bool) {
	for _, e := range m.Files {
		if e.Split == split && ((party == 0 && e.Kind == "labels") || (party > 0 && e.Kind == "party" && e.Party == party)) {
			return e, true
		}
	}
	return ManifestEntry{}, false
}

// WritePartyFile writes one party file (the format of WriteSplit) to
// dir/name: header h, then ids[i] and row i of x. It returns the file's
// manifest entry. For an organisation that writes only its own part of a
// split (private entity alignment).
func WritePartyFile(dir, name string, h PartyHeader, ids []string, x *Matrix) (ManifestEntry, error) {
	if len(ids) != x.NRows || h.Samples != x.NRows {
		return ManifestEntry{}, fmt.Errorf("%w: %d ids, %d rows, header %d samples", ErrMismatch, len(ids), x.NRows, h.Samples)
	}
	d := &Dataset{IDs: ids}
	if err := checkIDs(&Dataset{IDs: ids, Y: make([]int32, len(ids))}); err != nil {
		return ManifestEntry{}, err
	}
	h.Version = splitVersion
	e, err := writeFileAtomic(dir, name, func(w io.Writer) error { return writeParty(w, h, d, x) })
	e.Kind, e.Split, e.Party, e.Samples, e.Columns, e.NNZ = "party", h.Split, h.Party, x.NRows, h.Hi-h.Lo, x.NNZ()
	return e, err
}

// WriteLabelsFile writes one labels file (the format of WriteSplit) to
// dir/name for the samples of d (its ids, labels and label values).
func WriteLabelsFile(dir, name, split string, d *Dataset) (ManifestEntry, error) {
	if err := checkIDs(d); err != nil {
		return ManifestEntry{}, err
	}
	e, err := writeFileAtomic(dir, name, func(w io.Writer) error { return writeLabels(w, d, split) })
	e.Kind, e.Split, e.Samples = "labels", split, d.Len()
	return e, err
}

// WriteManifest writes man as dir's ManifestFile (under a temporary name,
// renamed when complete). For a folder that holds one organisation's part
// of a split (private entity alignment): its manifest lists only the
// files it holds, with the whole split's layout.
func WriteManifest(dir string, man *SplitManifest) error {
	js, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return fmt.Errorf("dataset: manifest: %w", err)
	}
	_, err = writeFileAtomic(dir, ManifestFile, func(w io.Writer) error {
		_, err := w.Write(append(js, '\n'))
		return err
	})
	return err
}
