package dataset

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// idxBytes builds an IDX file of unsigned bytes with the given dimensions.
func idxBytes(dims []int, data []byte) []byte {
	b := []byte{0, 0, idxUbyte, byte(len(dims))}
	for _, n := range dims {
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, data...)
}

// tinyIDX returns 3 images of 2x2 pixels and their labels.
func tinyIDX() (images, labels []byte) {
	images = idxBytes([]int{3, 2, 2}, []byte{
		0, 255, 0, 51,
		0, 0, 0, 0,
		102, 0, 0, 1,
	})
	labels = idxBytes([]int{3}, []byte{7, 2, 7})
	return images, labels
}

func TestReadIDX(t *testing.T) {
	images, labels := tinyIDX()
	d, err := ReadIDX(bytes.NewReader(images), bytes.NewReader(labels), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.X.Check(); err != nil {
		t.Fatal(err)
	}
	want := [][]float32{{0, 1, 0, 0.2}, {0, 0, 0, 0}, {0.4, 0, 0, float32(1) / 255}}
	if !slices.EqualFunc(dense(d.X), want, slices.Equal) || d.X.NNZ() != 4 {
		t.Errorf("x = %v, want %v", dense(d.X), want)
	}
	if !slices.Equal(d.Y, []int32{1, 0, 1}) || !slices.Equal(d.LabelValues, []float64{2, 7}) || d.Format != FormatIDX {
		t.Errorf("y %v labels %v", d.Y, d.LabelValues)
	}
	// A fixed label map, as for a test set.
	d, err = ReadIDX(bytes.NewReader(images), bytes.NewReader(labels), []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	if err != nil || !slices.Equal(d.Y, []int32{7, 2, 7}) || d.Classes != 10 {
		t.Errorf("fixed labels: %v, %v", d, err)
	}
	_, err = ReadIDX(bytes.NewReader(images), bytes.NewReader(labels), []float64{2, 3})
	if !errors.Is(err, ErrMismatch) || !errors.Is(err, ErrFormat) {
		t.Errorf("label outside the map: %v", err)
	}
}

func TestReadIDXErrors(t *testing.T) {
	images, labels := tinyIDX()
	tests := []struct {
		name           string
		images, labels []byte
		want           error
		msg            string
	}{
		{"empty", nil, labels, ErrFormat, "truncated"},
		{"bad magic", append([]byte{1}, images[1:]...), labels, ErrFormat, "magic"},
		{"int32 type", append([]byte{0, 0, 0x0C}, images[3:]...), labels, ErrFormat, "0x0c"},
		{"short header", images[:9], labels, ErrFormat, "header"},
		{"truncated images", images[:len(images)-1], labels, ErrFormat, "sample 3 of 3"},
		{"trailing bytes", append(slices.Clone(images), 0), labels, ErrFormat, "after the last"},
		{"no pixels", idxBytes([]int{3, 0}, nil), labels, ErrFormat, "dimensions"},
		{"huge", idxBytes([]int{1 << 30, 1 << 30}, nil), labels, ErrFormat, "too large"},
		{"labels 2-d", images, idxBytes([]int{3, 1}, []byte{1, 2, 3}), ErrFormat, "dimensions"},
		{"truncated labels", images, labels[:len(labels)-1], ErrFormat, "2 of 3"},
		{"count mismatch", images, idxBytes([]int{2}, []byte{1, 2}), ErrMismatch, "3 images but 2 labels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadIDX(bytes.NewReader(tt.images), bytes.NewReader(tt.labels), nil)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not mention %q", err, tt.msg)
			}
		})
	}
}

// writeIDXFolder writes the four MNIST files into dir, gzip or plain, under
// the given names.
func writeIDXFolder(t *testing.T, dir string, gz bool, names ...string) {
	t.Helper()
	images, labels := tinyIDX()
	testImages := idxBytes([]int{1, 2, 2}, []byte{0, 0, 9, 0})
	testLabels := idxBytes([]int{1}, []byte{2})
	for k, content := range [][]byte{images, labels, testImages, testLabels} {
		if k < len(names) && names[k] != "" {
			writeFile(t, dir, names[k], string(content), gz)
		}
	}
}

func TestOpenIDXFolder(t *testing.T) {
	std := []string{IDXTrainImages, IDXTrainLabels, IDXTestImages, IDXTestLabels}
	gzNames := []string{IDXTrainImages + ".gz", IDXTrainLabels + ".gz", IDXTestImages + ".gz", IDXTestLabels + ".gz"}
	dotted := []string{"train-images.idx3-ubyte", "train-labels.idx1-ubyte", "t10k-images.idx3-ubyte", "t10k-labels.idx1-ubyte"}
	tests := []struct {
		name  string
		gz    bool
		files []string
	}{
		{"plain", false, std},
		{"gzip", true, gzNames},
		{"gzip without the extension", true, std},
		{"kaggle names", false, dotted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "digits")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			writeIDXFolder(t, dir, tt.gz, tt.files...)
			tr, te, err := OpenIDX(dir)
			if err != nil {
				t.Fatal(err)
			}
			if tr.Len() != 3 || te.Len() != 1 || te.X.NCols != 4 || !slices.Equal(te.Y, []int32{0}) || tr.Name != "digits" || te.Name != "digits/t10k" {
				t.Errorf("train %d %q, test %d %q y %v", tr.Len(), tr.Name, te.Len(), te.Name, te.Y)
			}
			// Open gives the training split; OpenPair both, however asked.
			d, err := Open(dir, OpenOptions{})
			if err != nil || d.Len() != 3 || d.Format != FormatIDX {
				t.Errorf("Open: %v %v", d, err)
			}
			for _, test := range []string{"", dir, dir + "/"} {
				tr, te, err := OpenPair(dir, test)
				if err != nil || tr.Len() != 3 || te.Len() != 1 {
					t.Errorf("OpenPair(dir, %q): %v", test, err)
				}
			}
			info, err := Inspect(dir)
			if err != nil || info.Samples != 3 || info.Features != 4 || info.Format != FormatIDX {
				t.Errorf("Inspect: %+v, %v", info, err)
			}
		})
	}
}

func TestOpenIDXFolderErrors(t *testing.T) {
	// Training files only: no test set.
	dir := t.TempDir()
	writeIDXFolder(t, dir, true, IDXTrainImages+".gz", IDXTrainLabels+".gz")
	tr, te, err := OpenIDX(dir)
	if err != nil || tr.Len() != 3 || te != nil {
		t.Errorf("train only: %v %v %v", tr, te, err)
	}
	if _, _, err := OpenPair(dir, ""); !errors.Is(err, ErrMismatch) {
		t.Errorf("OpenPair without t10k files: %v", err)
	}
	// The test set of another folder.
	other := t.TempDir()
	writeIDXFolder(t, other, false, "", "", IDXTestImages, IDXTestLabels)
	if _, te, err := OpenPair(dir, other); err != nil || te.Len() != 1 {
		t.Errorf("test set from another folder: %v", err)
	}
	// Images without labels.
	dir = t.TempDir()
	writeIDXFolder(t, dir, false, IDXTrainImages)
	if _, _, err := OpenIDX(dir); !errors.Is(err, ErrUnknownFormat) || !strings.Contains(err.Error(), IDXTrainLabels) {
		t.Errorf("no labels: %v", err)
	}
	// A labels file that is not IDX.
	writeFile(t, dir, IDXTrainLabels, "+1 1:1\n", false)
	if _, _, err := OpenIDX(dir); !errors.Is(err, ErrFormat) {
		t.Errorf("labels not IDX: %v", err)
	}
	// Test images of another size.
	dir = t.TempDir()
	writeIDXFolder(t, dir, false, IDXTrainImages, IDXTrainLabels, "", IDXTestLabels)
	writeFile(t, dir, IDXTestImages, string(idxBytes([]int{1, 3}, []byte{1, 2, 3})), false)
	if _, _, err := OpenPair(dir, ""); !errors.Is(err, ErrMismatch) {
		t.Errorf("test images 3 pixels: %v", err)
	}
}

// FuzzReadIDX: arbitrary images and labels content loads or fails with a
// package error; never a panic or a huge allocation.
func FuzzReadIDX(f *testing.F) {
	images, labels := tinyIDX()
	f.Add(images, labels)
	f.Add(images[:7], labels)
	f.Add(idxBytes([]int{1, 1}, []byte{3}), idxBytes([]int{1}, []byte{0}))
	f.Add(idxBytes([]int{1 << 20, 1 << 10}, []byte{1, 2}), labels)
	f.Fuzz(func(t *testing.T, images, labels []byte) {
		d, err := ReadIDX(bytes.NewReader(images), bytes.NewReader(labels), nil)
		if err != nil {
			if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrMismatch) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		if err := d.X.Check(); err != nil {
			t.Fatal(err)
		}
		for _, v := range d.X.Values {
			if !(v > 0 && v <= 1) {
				t.Fatalf("pixel %v", v)
			}
		}
	})
}
