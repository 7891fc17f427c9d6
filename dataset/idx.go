package dataset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// IDX element type codes (the third byte of an IDX file).
const idxUbyte = 0x08

// maxIDXCells bounds the number of cells an IDX header may declare, so a
// corrupt header cannot make the reader size anything by it.
const maxIDXCells = 1 << 40

// pixelScale maps a byte to its value in [0, 1].
var pixelScale = func() (t [256]float32) {
	for b := range t {
		t[b] = float32(b) / 255
	}
	return t
}()

// idxHeader reads an IDX header and returns its dimensions. The type must
// be unsigned byte.
func idxHeader(r io.Reader, what string) ([]int, error) {
	var magic [4]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil {
		return nil, idxReadError(err, what+" header")
	}
	if magic[0] != 0 || magic[1] != 0 || !isIDXType(magic[2]) || magic[3] == 0 {
		return nil, fmt.Errorf("%w: idx %s: bad magic % x (want 00 00 08 <dims>)", ErrFormat, what, magic)
	}
	if magic[2] != idxUbyte {
		return nil, fmt.Errorf("%w: idx %s: element type 0x%02x is not supported (only unsigned bytes, 0x08)", ErrFormat, what, magic[2])
	}
	raw := make([]byte, 4*int(magic[3]))
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, idxReadError(err, what+" header")
	}
	dims := make([]int, magic[3])
	cells := uint64(1)
	for k := range dims {
		n := binary.BigEndian.Uint32(raw[4*k:])
		dims[k] = int(n)
		if cells *= uint64(n); n != 0 && cells > maxIDXCells {
			return nil, fmt.Errorf("%w: idx %s: dimensions %v are too large", ErrFormat, what, dims[:k+1])
		}
	}
	return dims, nil
}

// idxReadError turns a short read into ErrFormat.
func idxReadError(err error, what string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: idx: truncated %s", ErrFormat, what)
	}
	return fmt.Errorf("dataset: idx: %s: %w", what, err)
}

// idxEnd checks that r holds nothing more.
func idxEnd(r io.Reader, what string) error {
	var one [1]byte
	n, err := io.ReadFull(r, one[:])
	if n > 0 {
		return fmt.Errorf("%w: idx %s: data after the last sample", ErrFormat, what)
	}
	if err != nil && err != io.EOF {
		return fmt.Errorf("dataset: idx %s: %w", what, err)
	}
	return nil
}

// ReadIDXImages reads an IDX file of unsigned bytes, such as MNIST's
// train-images-idx3-ubyte, as a matrix: one row per entry of the first
// dimension, the other dimensions flattened in row-major order into the
// columns (28 x 28 images give 784 columns, column 28*r+c for pixel (r, c)).
// A byte b becomes the value b/255, so pixels lie in [0, 1]; zero pixels
// are not stored (MNIST is about 19% non-zero, Fashion-MNIST about 50%).
//
// The reader streams: memory is the matrix (8 bytes a non-zero pixel).
// Malformed input (bad magic, another element type, truncated data,
// trailing bytes) gives an error wrapping ErrFormat.
func ReadIDXImages(r io.Reader) (*Matrix, error) {
	dims, err := idxHeader(r, "images")
	if err != nil {
		return nil, err
	}
	rows, cols := dims[0], 1
	for _, n := range dims[1:] {
		if cols *= n; cols == 0 || cols > math.MaxInt32 {
			return nil, fmt.Errorf("%w: idx images: unusable dimensions %v", ErrFormat, dims)
		}
	}
	if rows > math.MaxInt32 {
		return nil, fmt.Errorf("%w: idx images: unusable dimensions %v", ErrFormat, dims)
	}
	indptr := make([]int64, 1, min(rows, 1<<16)+1)
	var indices []int32
	var values []float32
	buf := make([]byte, min(cols, 1<<20))
	for i := range rows {
		for lo := 0; lo < cols; lo += len(buf) {
			chunk := buf[:min(len(buf), cols-lo)]
			if _, err := io.ReadFull(r, chunk); err != nil {
				return nil, idxReadError(err, fmt.Sprintf("images: sample %d of %d", i+1, rows))
			}
			for k, b := range chunk {
				if b != 0 {
					indices = append(indices, int32(lo+k))
					values = append(values, pixelScale[b])
				}
			}
		}
		indptr = append(indptr, int64(len(indices)))
	}
	if err := idxEnd(r, "images"); err != nil {
		return nil, err
	}
	return &Matrix{NRows: rows, NCols: cols, Indptr: slices.Clip(indptr), Indices: slices.Clip(indices), Values: slices.Clip(values)}, nil
}

// ReadIDXLabels reads a one-dimensional IDX file of unsigned bytes, such
// as MNIST's train-labels-idx1-ubyte.
func ReadIDXLabels(r io.Reader) ([]byte, error) {
	dims, err := idxHeader(r, "labels")
	if err != nil {
		return nil, err
	}
	if len(dims) != 1 {
		return nil, fmt.Errorf("%w: idx labels: %d dimensions, want 1", ErrFormat, len(dims))
	}
	labels := make([]byte, 0, min(dims[0], 1<<16))
	var buf [4096]byte
	for n := dims[0]; n > 0; {
		k, err := io.ReadFull(r, buf[:min(n, len(buf))])
		labels = append(labels, buf[:k]...)
		n -= k
		if err != nil {
			return nil, idxReadError(err, fmt.Sprintf("labels: %d of %d read", len(labels), dims[0]))
		}
	}
	if err := idxEnd(r, "labels"); err != nil {
		return nil, err
	}
	return labels, nil
}

// ReadIDX reads a data set from an IDX images file and its labels file;
// see ReadIDXImages. The classes are the distinct labels in increasing
// order (0..9 for MNIST), unless labels fixes them as in
// LIBSVMOptions.Labels; a label outside a given map is an error wrapping
// ErrFormat and ErrMismatch. Images and labels must count the same samples
// (ErrMismatch).
func ReadIDX(images, labels io.Reader, labelValues []float64) (*Dataset, error) {
	x, err := ReadIDXImages(images)
	if err != nil {
		return nil, err
	}
	raw, err := ReadIDXLabels(labels)
	if err != nil {
		return nil, err
	}
	if len(raw) != x.NRows {
		return nil, fmt.Errorf("%w: idx: %d images but %d labels", ErrMismatch, x.NRows, len(raw))
	}
	var classOf [256]int32
	for b := range classOf {
		classOf[b] = -1
	}
	if labelValues == nil {
		var seen [256]bool
		for _, b := range raw {
			seen[b] = true
		}
		for b, ok := range seen {
			if ok {
				labelValues = append(labelValues, float64(b))
			}
		}
	}
	for c, v := range labelValues {
		if v >= 0 && v <= 255 && v == math.Trunc(v) {
			classOf[int(v)] = int32(c)
		}
	}
	y := make([]int32, len(raw))
	for i, b := range raw {
		if y[i] = classOf[b]; y[i] < 0 {
			return nil, fmt.Errorf("%w: idx: sample %d: label %d is not one of the training labels %v (%w)",
				ErrFormat, i+1, b, labelValues, ErrMismatch)
		}
	}
	return &Dataset{
		Format:      FormatIDX,
		X:           x,
		Y:           y,
		Classes:     len(labelValues),
		LabelValues: labelValues,
	}, nil
}

// IDX file names in a folder, as MNIST and Fashion-MNIST ship them; each
// may also end in ".gz", and the Kaggle spelling with a dot before
// "idx" (train-images.idx3-ubyte) is accepted too.
const (
	IDXTrainImages = "train-images-idx3-ubyte"
	IDXTrainLabels = "train-labels-idx1-ubyte"
	IDXTestImages  = "t10k-images-idx3-ubyte"
	IDXTestLabels  = "t10k-labels-idx1-ubyte"
)

// idxPath finds the file of the given base name in dir: plain, .gz, or
// with the dotted spelling. It returns "" if there is none.
func idxPath(dir, base string) string {
	dotted := base
	if k := len(base) - len("-idx3-ubyte"); k > 0 && base[k] == '-' {
		dotted = base[:k] + "." + base[k+1:]
	}
	for _, name := range []string{base, base + ".gz", dotted, dotted + ".gz"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	return ""
}

// OpenIDX reads an IDX folder such as MNIST or Fashion-MNIST: the training
// set from train-images-idx3-ubyte and train-labels-idx1-ubyte, the test
// set from t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each plain
// or gzip-compressed (see ReadIDX for the values: pixels scaled to [0, 1],
// zeros not stored). The test set gets the training set's classes. test is
// nil if the folder has no t10k files; a folder without the training files
// is an error wrapping ErrUnknownFormat.
//
// The training set is named after the folder ("mnist"), the test set
// "mnist/t10k".
func OpenIDX(dir string) (train, test *Dataset, err error) {
	if train, err = openIDXSplit(dir, IDXTrainImages, IDXTrainLabels, nil); err != nil {
		return nil, nil, err
	}
	if idxPath(dir, IDXTestImages) == "" && idxPath(dir, IDXTestLabels) == "" {
		return train, nil, nil
	}
	if test, err = openIDXSplit(dir, IDXTestImages, IDXTestLabels, train.LabelValues); err != nil {
		return nil, nil, err
	}
	test.Name = train.Name + "/t10k"
	return train, test, nil
}

// openIDXSplit reads one images/labels pair of an IDX folder.
func openIDXSplit(dir, images, labels string, labelValues []float64) (*Dataset, error) {
	ip, lp := idxPath(dir, images), idxPath(dir, labels)
	if ip == "" || lp == "" {
		missing := images
		if ip != "" {
			missing = labels
		}
		return nil, fmt.Errorf("%s: %w: a folder is read as IDX files and %s[.gz] is not in it (want %s, %s, %s, %s)",
			dir, ErrUnknownFormat, missing, IDXTrainImages, IDXTrainLabels, IDXTestImages, IDXTestLabels)
	}
	isrc, err := openSource(ip)
	if err != nil {
		return nil, err
	}
	defer isrc.Close()
	lsrc, err := openSource(lp)
	if err != nil {
		return nil, err
	}
	defer lsrc.Close()
	for _, s := range []*source{isrc, lsrc} {
		if s.format != FormatIDX {
			return nil, fmt.Errorf("%s: %w: not an IDX file", s.path, ErrFormat)
		}
	}
	d, err := ReadIDX(isrc.r, lsrc.r, labelValues)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	d.Name = datasetName(dir)
	return d, nil
}
