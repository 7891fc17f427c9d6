package dataset

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"
)

// supported describes the formats Open reads, for error messages.
const supported = "supported: LIBSVM text and CSV with a header (plain or gzip), and folders of IDX files (MNIST layout)"

// sniffSize is how much of the (decompressed) start of a file format
// detection looks at.
const sniffSize = 64 << 10

// OpenOptions configures Open.
type OpenOptions struct {
	// Format forces the format of the file (FormatLIBSVM, FormatCSV) or
	// folder (FormatIDX). Empty means detect it from the content.
	Format string

	// LIBSVM configures the LIBSVM reader.
	LIBSVM LIBSVMOptions

	// CSV configures the CSV reader.
	CSV CSVOptions
}

// Open reads the data set at path. A gzip-compressed file is recognised by
// its magic bytes, whatever its name, and decompressed on the fly. Unless
// opts.Format says otherwise, the format is detected from the content:
// LIBSVM text (see ReadLIBSVM) or CSV, whose first line has a comma (see
// ReadCSV). A folder is read as IDX files and Open returns its training
// split (see OpenIDX, and OpenPair for both splits). A single IDX file, or
// any other content, gives an error wrapping ErrUnknownFormat that lists
// the supported formats.
//
// The Dataset's Name is the file name without a ".gz" suffix, so
// "a9a.t.gz" is named "a9a.t", or the folder's name.
func Open(path string, opts OpenOptions) (*Dataset, error) {
	src, err := openSource(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	format := src.formatFor(opts)
	if err := csvOnly(format, opts); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var d *Dataset
	switch {
	case src.dir && format != FormatIDX:
		err = fmt.Errorf("%w: a folder cannot be read as %s; %s", ErrUnknownFormat, format, supported)
	case src.dir:
		d, _, err = OpenIDX(path)
		return d, err // OpenIDX names the folder in its errors
	case format == FormatLIBSVM:
		d, err = ReadLIBSVM(src.r, opts.LIBSVM)
	case format == FormatCSV:
		d, err = ReadCSV(src.r, opts.CSV)
	case format == FormatParty || format == FormatLabels:
		return nil, fmt.Errorf("%s: %w", path, splitMember(path, format))
	default:
		err = src.unsupported(format)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	d.Name = datasetName(path)
	return d, nil
}

// OpenPair reads a training set and its test set. The test set is read with
// the training set's label map (and, for CSV, its encoding) and is padded to
// its number of features, so both have the same columns and class indices
// even when the test file never uses the highest feature (as a9a.t, whose
// highest index is 122 of 123). A test set with more features than the
// training set, or in another format, gives an error wrapping ErrMismatch;
// a test label the training set does not have is an error too (see
// ReadLIBSVM).
//
// If train is an IDX folder, test may be empty or the same folder (its t10k
// files are the test set, see OpenIDX) or another IDX folder (its t10k
// files). If train is a file and test is empty, the test set is nil.
func OpenPair(train, test string) (tr, te *Dataset, err error) {
	return OpenPairOptions(train, test, OpenOptions{})
}

// OpenPairOptions is OpenPair with options for the training set; the test
// set is read with the same options, less what the training set fixes
// (features, labels, CSV encoding).
func OpenPairOptions(train, test string, opts OpenOptions) (tr, te *Dataset, err error) {
	if fi, err := os.Stat(train); err == nil && fi.IsDir() && (opts.Format == "" || opts.Format == FormatIDX) {
		tr, te, err := OpenIDX(train)
		if err != nil {
			return nil, nil, err
		}
		if test != "" && filepath.Clean(test) != filepath.Clean(train) {
			if te, err = openIDXSplit(test, IDXTestImages, IDXTestLabels, tr.LabelValues); err != nil {
				return nil, nil, err
			}
			te.Name = datasetName(test) + "/t10k"
		}
		if te == nil {
			return nil, nil, fmt.Errorf("%s: %w: the folder has no %s and %s files for a test set", train, ErrMismatch, IDXTestImages, IDXTestLabels)
		}
		if te.X.NCols != tr.X.NCols {
			return nil, nil, fmt.Errorf("%w: test images have %d pixels, training images %d", ErrMismatch, te.X.NCols, tr.X.NCols)
		}
		return tr, te, nil
	}
	tr, err = Open(train, opts)
	if err != nil {
		return nil, nil, err
	}
	if test == "" {
		return tr, nil, nil
	}
	te, err = Open(test, testOptions(tr, opts))
	if err != nil {
		return nil, nil, err
	}
	if te.Format != tr.Format {
		return nil, nil, fmt.Errorf("%w: test set %s is %s, training set %s is %s",
			ErrMismatch, test, te.Format, train, tr.Format)
	}
	if te.X.NCols != tr.X.NCols { // LIBSVM pads a narrower test set; wider is an error
		return nil, nil, fmt.Errorf("%w: test set %s has %d features, training set %s has %d",
			ErrMismatch, test, te.X.NCols, train, tr.X.NCols)
	}
	return tr, te, nil
}

// testOptions are the options that read a test set so that it lines up with
// the training set tr, read with opts.
func testOptions(tr *Dataset, opts OpenOptions) OpenOptions {
	opts.Format = ""
	opts.LIBSVM = LIBSVMOptions{Features: tr.X.NCols, Labels: tr.LabelValues}
	opts.CSV.Labels = tr.LabelValues
	opts.CSV.Encoding = tr.Encoding
	return opts
}

// datasetName is the base name of path without a compression suffix.
func datasetName(path string) string {
	name := filepath.Base(filepath.Clean(path))
	for _, ext := range []string{".gz", ".gzip"} {
		if len(name) > len(ext) && strings.EqualFold(name[len(name)-len(ext):], ext) {
			return name[:len(name)-len(ext)]
		}
	}
	return name
}

// source is an opened data file or folder: its decompressed content and
// the format detected from it.
type source struct {
	path   string
	dir    bool   // a folder (IDX files)
	gzip   bool   // the file is gzip-compressed
	format string // detected format, "" if unknown
	r      *bufio.Reader
	file   *os.File
	gz     *gzip.Reader
}

// openSource opens path, looks through gzip compression and detects the
// format from the first bytes.
func openSource(path string) (*source, error) {
	fi, err := os.Stat(path)
	if err != nil {
		if hint := FetchHint(path); hint != "" && errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("dataset: %w: %s", err, hint)
		}
		return nil, fmt.Errorf("dataset: %w", err)
	}
	src := &source{path: path}
	if fi.IsDir() {
		src.dir, src.format = true, FormatIDX
		return src, nil
	}
	if src.file, err = os.Open(path); err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	src.r = bufio.NewReaderSize(src.file, readBufferSize)
	if magic, _ := src.r.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		src.gzip = true
		if src.gz, err = gzip.NewReader(src.r); err != nil {
			src.Close()
			return nil, fmt.Errorf("%s: %w: gzip: %w", path, ErrFormat, err)
		}
		src.r = bufio.NewReaderSize(gzipErrors{src.gz}, readBufferSize)
	}
	head, err := src.r.Peek(sniffSize)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		src.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	src.format = detectFormat(head, err != nil)
	return src, nil
}

// formatFor is the format to read the source in: the one opts forces, CSV
// if opts skip lines before a CSV header (which detection cannot see
// past), else the detected one.
func (s *source) formatFor(opts OpenOptions) string {
	switch {
	case opts.Format != "":
		return opts.Format
	case opts.CSV.SkipRows > 0 && !s.dir:
		return FormatCSV
	}
	return s.format
}

// csvOnly refuses CSV column options for a file of another format, rather
// than ignoring them.
func csvOnly(format string, opts OpenOptions) error {
	if format != FormatCSV && opts.CSV.Given() {
		return fmt.Errorf("%w: the CSV options (label, id, categorical, dropped columns, rows to skip) are for CSV files, and this is %s", ErrMismatch, format)
	}
	return nil
}

// Close closes the underlying file.
func (s *source) Close() error {
	if s.file != nil {
		return s.file.Close()
	}
	return nil
}

// splitMember is the error for one file of a split folder given where a
// whole data set is expected.
func splitMember(path, format string) error {
	what := "a party's columns"
	if format == FormatLabels {
		what = "the aggregator's labels"
	}
	return fmt.Errorf("%w (%s, written by asyrevel data split): give the folder, %s, whose manifest describes the whole set",
		ErrSplitFile, what, filepath.Dir(path))
}

// unsupported is the error for a source whose format Open cannot read.
func (s *source) unsupported(format string) error {
	var what string
	switch {
	case format == FormatIDX:
		return fmt.Errorf("%w: a single IDX file cannot be read: open the folder that holds %s, %s, %s and %s[.gz]",
			ErrUnknownFormat, IDXTrainImages, IDXTrainLabels, IDXTestImages, IDXTestLabels)
	case format == "":
		return fmt.Errorf("%w: content is not LIBSVM, CSV or IDX; %s", ErrUnknownFormat, supported)
	default:
		what = "format " + strconv.Quote(format)
	}
	return fmt.Errorf("%w: %s is not supported; %s", ErrUnknownFormat, what, supported)
}

// gzipErrors marks corrupt or truncated gzip data as ErrFormat, leaving
// other (I/O) errors alone.
type gzipErrors struct{ r io.Reader }

func (g gzipErrors) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if err != nil && err != io.EOF {
		var corrupt flate.CorruptInputError
		if errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) ||
			errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &corrupt) {
			err = fmt.Errorf("%w: gzip: %w", ErrFormat, err)
		}
	}
	return n, err
}

// detectFormat guesses the format of a file from its first bytes, head
// (after decompression). atEOF reports that head is the whole file. It
// returns "" if the format is not recognised.
//
// An IDX file starts with two zero bytes, a type code and a dimension count.
// Text whose first non-blank line has a comma is CSV. Text whose first
// non-blank lines each hold a number followed by index:value (or qid:)
// tokens is LIBSVM. A file of bare numbers, one a line, is ambiguous; it is
// taken for LIBSVM with empty samples.
func detectFormat(head []byte, atEOF bool) string {
	switch {
	case bytes.HasPrefix(head, []byte(partyPrefix)):
		return FormatParty
	case bytes.HasPrefix(head, []byte(labelsPrefix)):
		return FormatLabels
	}
	if len(head) >= 4 && head[0] == 0 && head[1] == 0 && isIDXType(head[2]) && head[3] >= 1 {
		return FormatIDX
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return ""
	}
	lines := bytes.Split(head, []byte{'\n'})
	partial := !atEOF // the last line may be cut
	const maxLines = 16
	checked := 0
	for k, line := range lines {
		cut := partial && k == len(lines)-1
		if cut && checked > 0 {
			break
		}
		if !utf8.Valid(line) && !cut {
			return ""
		}
		if c := bytes.IndexByte(line, '#'); c >= 0 {
			line, cut = line[:c], false
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if checked == 0 && bytes.IndexByte(line, ',') >= 0 {
			return FormatCSV
		}
		if !libsvmLike(line, cut) {
			return ""
		}
		if checked++; checked == maxLines {
			break
		}
	}
	if checked == 0 {
		return ""
	}
	return FormatLIBSVM
}

// isIDXType reports whether c is an IDX element type code.
func isIDXType(c byte) bool {
	switch c {
	case 0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E:
		return true
	}
	return false
}

// libsvmLike reports whether line looks like a LIBSVM sample: a number,
// then index:value or qid:value tokens. If cut, the line may be truncated
// and its last token is not checked.
func libsvmLike(line []byte, cut bool) bool {
	fields := bytes.Fields(line)
	if cut {
		fields = fields[:max(len(fields)-1, 0)]
	}
	if len(fields) == 0 {
		return false
	}
	if _, err := strconv.ParseFloat(string(fields[0]), 64); err != nil {
		return false
	}
	for _, f := range fields[1:] {
		c := bytes.IndexByte(f, ':')
		if c < 0 {
			return false
		}
		if string(f[:c]) == "qid" {
			continue
		}
		if _, ok := parseIndex(f[:c]); !ok {
			return false
		}
	}
	return true
}
