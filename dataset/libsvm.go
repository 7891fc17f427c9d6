package dataset

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime/debug"
	"slices"
	"strconv"
	"unsafe"
)

// Format names, as stored in Dataset.Format and Info.Format.
const (
	FormatLIBSVM = "libsvm"
	FormatCSV    = "csv"
	FormatIDX    = "idx"
	// FormatParty and FormatLabels are the two kinds of files of a split
	// folder (party.go): Inspect reads them alone, Open refuses them
	// (their folder is the data set).
	FormatParty     = "split party file"
	FormatLabels    = "split labels file"
	FormatSynthetic = "synthetic"
)

// maxInferredClasses bounds the number of distinct labels ReadLIBSVM infers.
// More than that is almost certainly a regression target, which this package
// does not model.
const maxInferredClasses = 1 << 16

// ReadLIBSVM collects entries in chunks of minChunk to maxChunk entries.
const (
	minChunk = 1 << 14
	maxChunk = 1 << 22
)

// readBufferSize is the size of the bufio.Reader the text parsers read
// through. Lines longer than this are still read, through a scratch buffer.
const readBufferSize = 256 << 10

// LIBSVMOptions configures ReadLIBSVM.
type LIBSVMOptions struct {
	// Features is the minimum number of columns of the result. The matrix
	// has max(Features, highest index in the data) columns, so a test file
	// can be padded to the width of its training file. Zero means the
	// highest index seen.
	Features int

	// Labels, if not nil, fixes the label to class map: the label
	// Labels[c] is class c. It is meant to be a training set's
	// LabelValues, so that a test set gets the same class indices. A label
	// not in Labels is an error. If nil, the classes are the sorted distinct
	// labels of the data.
	Labels []float64
}

// ReadLIBSVM reads a data set in LIBSVM (SVMlight) sparse text format from r.
//
// Each line is a sample:
//
//	<label> <index>:<value> <index>:<value> ...
//
// with 1-based, strictly increasing indices; column j of the result holds
// index j+1. Tokens are separated by spaces or tabs; CRLF line ends, blank
// lines, "qid:" tokens and everything after a '#' are ignored. A line with
// only a label is a sample with no non-zero feature. Explicit zeros are not
// stored, but they count towards the number of columns (the LIBSVM idiom
// "123:0" declares a width of 123).
//
// Labels are numbers such as +1, -1, 0, 1 or 2. Without opts.Labels the
// classes are the distinct labels in increasing order, so for binary data
// class 0 is -1 (or 0) and class 1 is +1 (or 1). Data holding a single label
// among -1, 0 and +1 is completed to the binary pair it belongs to ({-1, +1}
// or {0, 1}), which keeps class 1 the positive class.
//
// Values are stored as float32; a value that does not fit, or is not finite,
// is an error. Errors caused by the input wrap ErrFormat and name the line
// and the offending token; a label outside a given opts.Labels wraps both
// ErrFormat and ErrMismatch.
//
// ReadLIBSVM streams: memory is proportional to the number of stored
// entries (8 bytes each, exactly allocated; while reading, the entries are
// collected in chunks and copied once at the end, with a transient peak of
// 1.2 to 1.5 times), plus 12 bytes per sample, never to the size of the
// text.
func ReadLIBSVM(r io.Reader, opts LIBSVMOptions) (*Dataset, error) {
	p, err := newLIBSVMReader(r, opts)
	if err != nil {
		return nil, err
	}
	// Entries are collected in chunks of growing size, then copied once
	// into exactly sized slices: no slice-growth copies, no spare capacity.
	var (
		indptr   = []int64{0}
		ids      []int32
		nnz      int64
		chunkIdx [][]int32
		chunkVal [][]float32
		size     = minChunk
	)
	p.idx, p.val = make([]int32, 0, size), make([]float32, 0, size)
	for {
		id, ok, err := p.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		nnz += int64(p.rowLen)
		indptr = append(indptr, nnz)
		ids = append(ids, id)
		// Start a new chunk when this one is full or would likely overflow
		// on a row like the last one (append would then copy it).
		if free := cap(p.idx) - len(p.idx); len(p.idx) >= size || free < p.rowLen {
			chunkIdx, chunkVal = append(chunkIdx, p.idx), append(chunkVal, p.val)
			size = min(2*size, maxChunk)
			p.idx, p.val = make([]int32, 0, size), make([]float32, 0, size)
		}
	}
	chunkIdx, chunkVal = append(chunkIdx, p.idx), append(chunkVal, p.val)
	p.idx, p.val = nil, nil
	indices, values := joinChunks(chunkIdx, nnz), joinChunks(chunkVal, nnz)
	labelValues, perm := p.classes()
	if perm != nil {
		for i, id := range ids {
			ids[i] = perm[id]
		}
	}
	cols := max(opts.Features, p.maxCol)
	return &Dataset{
		Format:      FormatLIBSVM,
		X:           &Matrix{NRows: len(ids), NCols: cols, Indptr: slices.Clip(indptr), Indices: indices, Values: values},
		Y:           slices.Clip(ids),
		Classes:     len(labelValues),
		LabelValues: labelValues,
	}, nil
}

// releaseEvery is how many bytes of chunks joinChunks copies between
// returning the copied ones to the operating system, for large matrices.
const releaseEvery = 1 << 30

// joinChunks concatenates chunks, n elements in all, into one exactly
// sized slice, dropping each chunk once copied. For a large matrix (at
// least releaseEvery bytes) it returns the dropped chunks' memory to the
// operating system every releaseEvery bytes, so that the peak resident
// memory stays near the size of the matrix rather than twice it.
func joinChunks[T int32 | float32](chunks [][]T, n int64) []T {
	if len(chunks) == 1 && int64(cap(chunks[0])) == n {
		return chunks[0]
	}
	out := make([]T, 0, n)
	var zero T
	size := int64(unsafe.Sizeof(zero))
	copied := int64(0)
	for k := range chunks {
		out = append(out, chunks[k]...)
		copied += int64(len(chunks[k])) * size
		chunks[k] = nil
		if n*size >= releaseEvery && copied >= releaseEvery {
			debug.FreeOSMemory()
			copied = 0
		}
	}
	return out
}

// WriteLIBSVM writes d to w in LIBSVM format, one line per sample, with
// 1-based indices and the labels written as d.LabelValues (+1 for the
// positive class of a -1/+1 set), or as class indices if d.LabelValues is
// nil. Values are written in the shortest form that reads back to the same
// float32, so ReadLIBSVM with the same Features and Labels gives back d.
// A class outside d.LabelValues is an error wrapping ErrMismatch.
func WriteLIBSVM(w io.Writer, d *Dataset) error {
	if d.X == nil || d.X.NRows != len(d.Y) {
		return fmt.Errorf("%w: write libsvm: matrix rows and labels differ", ErrMismatch)
	}
	if d.LabelValues != nil && len(d.LabelValues) < d.Classes {
		return fmt.Errorf("%w: write libsvm: %d label values for %d classes", ErrMismatch, len(d.LabelValues), d.Classes)
	}
	labels := make([]string, len(d.LabelValues))
	for c := range d.LabelValues {
		labels[c] = labelText(d.LabelValues, c)
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	var buf []byte
	for i, y := range d.Y {
		if y < 0 || (d.LabelValues != nil && int(y) >= len(d.LabelValues)) {
			return fmt.Errorf("%w: write libsvm: sample %d has class %d", ErrMismatch, i, y)
		}
		buf = buf[:0]
		if d.LabelValues != nil {
			buf = append(buf, labels[y]...)
		} else {
			buf = strconv.AppendInt(buf, int64(y), 10)
		}
		idx, val := d.X.Row(i)
		for k, j := range idx {
			buf = append(buf, ' ')
			buf = strconv.AppendInt(buf, int64(j)+1, 10)
			buf = append(buf, ':')
			buf = strconv.AppendFloat(buf, float64(val[k]), 'g', -1, 32)
		}
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return fmt.Errorf("dataset: write libsvm: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("dataset: write libsvm: %w", err)
	}
	return nil
}

// labelText writes the label of class c as LIBSVM does: +1 for the
// positive class of a -1/+1 set, the shortest exact form otherwise.
func labelText(values []float64, c int) string {
	if c == 1 && len(values) == 2 && values[0] == -1 && values[1] == 1 {
		return "+1"
	}
	return strconv.FormatFloat(values[c], 'g', -1, 64)
}

// libsvmReader parses LIBSVM text a row at a time. ReadLIBSVM builds a
// matrix from the rows; Inspect only counts them.
type libsvmReader struct {
	lines lineReader

	fixed  []float64         // the given label values, or nil
	labels map[float64]int32 // label -> class (fixed) or provisional id (inferred)
	seen   []float64         // inferred: provisional id -> label
	counts []int             // rows per provisional id or class

	maxCol int // highest 1-based index seen, explicit zeros included

	idx    []int32   // entries parsed so far (or since the caller reset them)
	val    []float32 //
	rowLen int       // entries of the last row

	known []knownLabel // the first label spellings seen: a fast path
}

func newLIBSVMReader(r io.Reader, opts LIBSVMOptions) (*libsvmReader, error) {
	if opts.Features < 0 || opts.Features > math.MaxInt32 {
		return nil, fmt.Errorf("dataset: libsvm: Features %d out of range", opts.Features)
	}
	p := &libsvmReader{
		lines:  lineReader{br: bufio.NewReaderSize(r, readBufferSize)},
		labels: make(map[float64]int32),
	}
	if opts.Labels != nil {
		p.fixed = slices.Clone(opts.Labels)
		p.counts = make([]int, len(opts.Labels))
		for c, v := range opts.Labels {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("dataset: libsvm: label value %v is not finite", v)
			}
			if _, dup := p.labels[v]; dup {
				return nil, fmt.Errorf("dataset: libsvm: label value %v given twice", v)
			}
			p.labels[v] = int32(c)
		}
	}
	return p, nil
}

// next parses the next sample, appending its p.rowLen entries to p.idx
// and p.val, and returns its class (fixed labels) or provisional label id
// (inferred labels). At the end of the input ok is false.
func (p *libsvmReader) next() (id int32, ok bool, err error) {
	for {
		line, err := p.lines.next()
		if err == io.EOF {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, fmt.Errorf("dataset: libsvm: line %d: %w", p.lines.n+1, err)
		}
		id, ok, err := p.parseLine(line)
		if err != nil || ok {
			return id, ok, err
		}
		// blank or comment-only line
	}
}

// space marks the bytes that separate tokens.
var space = [256]bool{' ': true, '\t': true, '\r': true, '\v': true, '\f': true}

// parseLine parses one line; ok is false for a line with no sample.
func (p *libsvmReader) parseLine(line []byte) (id int32, ok bool, err error) {
	if k := bytes.IndexByte(line, '#'); k >= 0 {
		line = line[:k]
	}
	i, n := 0, len(line)
	for i < n && space[line[i]] {
		i++
	}
	if i == n {
		return 0, false, nil
	}
	start := i
	for i < n && !space[line[i]] {
		i++
	}
	if id, err = p.label(line[start:i]); err != nil {
		return 0, false, err
	}
	idx, val := p.idx, p.val
	first, prev := len(idx), 0
	for {
		for i < n && space[line[i]] {
			i++
		}
		if i == n {
			break
		}
		// index: up to 10 digits, then ':'
		start = i
		j := 0
		for i < n && i-start < 11 && line[i]-'0' <= 9 {
			j = j*10 + int(line[i]-'0')
			i++
		}
		if i == n || line[i] != ':' || i == start || i-start > 10 || j < 1 || j > math.MaxInt32 {
			for i < n && !space[line[i]] {
				i++
			}
			tok := line[start:i]
			if bytes.HasPrefix(tok, []byte("qid:")) {
				continue
			}
			if bytes.IndexByte(tok, ':') < 0 {
				return 0, false, p.errorf(tok, "want index:value")
			}
			return 0, false, p.errorf(tok, "index is not an integer in [1, 2147483647]")
		}
		i++ // ':'
		vstart := i
		for i < n && !space[line[i]] {
			i++
		}
		if j <= prev {
			return 0, false, p.errorf(line[start:i], fmt.Sprintf("index %d does not increase (previous %d)", j, prev))
		}
		prev = j
		var v float32
		if tok := line[vstart:i]; len(tok) == 1 && tok[0]-'0' <= 9 {
			v = float32(tok[0] - '0') // the 0/1 features of most LIBSVM sets
		} else if v, ok = parseValue(tok); !ok {
			return 0, false, p.errorf(line[start:i], "value is not a finite float32")
		}
		if v != 0 {
			idx = append(idx, int32(j-1))
			val = append(val, v)
		}
	}
	p.maxCol = max(p.maxCol, prev)
	p.idx, p.val, p.rowLen = idx, val, len(idx)-first
	return id, true, nil
}

// label maps a label token to its class or provisional id.
func (p *libsvmReader) label(tok []byte) (int32, error) {
	for k := range p.known {
		if string(p.known[k].tok) == string(tok) {
			id := p.known[k].id
			p.counts[id]++
			return id, nil
		}
	}
	id, err := p.lookupLabel(tok)
	if err == nil && len(p.known) < 8 && len(tok) <= 16 {
		p.known = append(p.known, knownLabel{slices.Clone(tok), id})
	}
	return id, err
}

// knownLabel is a label token already seen and its id.
type knownLabel struct {
	tok []byte
	id  int32
}

// lookupLabel maps a label token to its class or provisional id.
func (p *libsvmReader) lookupLabel(tok []byte) (int32, error) {
	v, ok := parseFloat(tok, 64)
	if !ok {
		return 0, p.errorf(tok, "label is not a finite number")
	}
	if id, ok := p.labels[v]; ok {
		p.counts[id]++
		return id, nil
	}
	if p.fixed != nil {
		return 0, fmt.Errorf("%w: line %d: label %s is not one of the %d training labels %v (%w)",
			ErrFormat, p.lines.n, quote(tok), len(p.fixed), p.fixed, ErrMismatch)
	}
	if len(p.seen) == maxInferredClasses {
		return 0, p.errorf(tok, fmt.Sprintf("more than %d distinct labels (regression targets are not supported)", maxInferredClasses))
	}
	id := int32(len(p.seen))
	p.labels[v] = id
	p.seen = append(p.seen, v)
	p.counts = append(p.counts, 1)
	return id, nil
}

// classes returns the label values by class and, for inferred labels, the
// map perm from provisional id to class (nil for fixed labels). It also
// reorders p.counts by class.
func (p *libsvmReader) classes() (values []float64, perm []int32) {
	if p.fixed != nil {
		return p.fixed, nil
	}
	values = slices.Clone(p.seen)
	slices.Sort(values)
	if len(values) == 1 {
		switch values[0] {
		case -1, 1:
			values = []float64{-1, 1}
		case 0:
			values = []float64{0, 1}
		}
	}
	perm = make([]int32, len(p.seen))
	counts := make([]int, len(values))
	for id, v := range p.seen {
		c, _ := slices.BinarySearch(values, v)
		perm[id] = int32(c)
		counts[c] = p.counts[id]
	}
	p.counts = counts
	return values, perm
}

func (p *libsvmReader) errorf(tok []byte, msg string) error {
	return fmt.Errorf("%w: line %d: token %s: %s", ErrFormat, p.lines.n, quote(tok), msg)
}

// quote quotes a token for an error message, shortening long ones.
func quote(tok []byte) string {
	const limit = 40
	if len(tok) > limit {
		return strconv.Quote(string(tok[:limit])) + "..."
	}
	return strconv.Quote(string(tok))
}

// parseIndex parses a positive decimal integer that fits an int32.
func parseIndex(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n < 1 || n > math.MaxInt32 {
		return 0, false
	}
	return n, true
}

// parseValue parses a feature value as a finite float32.
func parseValue(b []byte) (float32, bool) {
	if v, ok := parseShortDecimal(b); ok {
		return v, true
	}
	v, ok := parseFloat(b, 32)
	return float32(v), ok
}

// parseFloat parses a finite number with strconv.ParseFloat, less the Go
// literal syntax it also accepts (digit-separating underscores).
func parseFloat(b []byte, bitSize int) (float64, bool) {
	if bytes.IndexByte(b, '_') >= 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(bytesString(b), bitSize)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}

// pow10f32 holds the powers of ten that are exact in float32.
var pow10f32 = [...]float32{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10}

// parseShortDecimal is the fast path of parseValue for the common plain
// decimals, [+-]digits[.digits] with a value of at most 2^24-1 units in the
// last place and at most 10 decimals, such as 1, 0.5 or -0.0132678. Both
// the integer m and the power of ten are exact in float32, so m / 10^k is
// correctly rounded, as strconv.ParseFloat(s, 32) would be. It reports
// false for anything else, which then goes through strconv.
func parseShortDecimal(b []byte) (float32, bool) {
	i, neg := 0, false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg, i = b[0] == '-', 1
	}
	m, digits, frac := 0, 0, -1
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case c-'0' <= 9:
			m = m*10 + int(c-'0')
			digits++
			if m >= 1<<24 {
				return 0, false
			}
			if frac >= 0 {
				frac++
			}
		case c == '.' && frac < 0:
			frac = 0
		default:
			return 0, false
		}
	}
	if digits == 0 || frac > 10 {
		return 0, false
	}
	v := float32(m)
	if frac > 0 {
		v /= pow10f32[frac]
	}
	if neg {
		v = -v
	}
	return v, true
}

// bytesString views b as a string without copying. The strconv parsers do
// not retain their input (they copy it into errors), so this is safe for
// them.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// lineReader returns the lines of a bufio.Reader without their line ends,
// without allocating for lines that fit the buffer.
type lineReader struct {
	br   *bufio.Reader
	long []byte // scratch for lines longer than the buffer
	n    int    // number of the line last returned, 1-based
}

// next returns the next line, valid until the next call, or io.EOF.
func (lr *lineReader) next() ([]byte, error) {
	line, err := lr.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		lr.long = append(lr.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = lr.br.ReadSlice('\n')
			lr.long = append(lr.long, line...)
		}
		line = lr.long
	}
	if err != nil && err != io.EOF {
		return nil, err
	}
	if len(line) == 0 {
		return nil, io.EOF
	}
	lr.n++
	if line[len(line)-1] == '\n' {
		line = line[:len(line)-1]
	}
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, nil
}
