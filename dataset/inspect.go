package dataset

import (
	"fmt"
	"strconv"
	"strings"
)

// Info summarises a data file, as reported by Inspect.
type Info struct {
	Path   string
	Format string // FormatLIBSVM, ...
	Gzip   bool   // the file is gzip-compressed

	Samples  int
	Features int // the highest feature index (LIBSVM) or the number of columns
	Classes  int

	// ClassCounts[c] is the number of samples of class c, whose label in
	// the file is LabelValues[c].
	ClassCounts []int
	LabelValues []float64

	NNZ     int     // stored (non-zero) entries
	Density float64 // NNZ / (Samples * Features), 0 for an empty matrix

	// Missing counts the missing values of a CSV file (empty or NA cells
	// in feature and label columns) and what the policy it was read with
	// did to them. MissingUndecided says the file was read without a
	// policy given (data inspect reads them as zeros to count them; the
	// other commands refuse such a file until told): String then says
	// what each policy would do.
	Missing          MissingCount
	MissingUndecided bool

	// Label says where the labels come from and why: for a CSV file the
	// label column's name, position and the reason it was taken; ID the
	// same for the id column ("" if none).
	Label, ID string
	// ClassNames names the classes, if the file does (scikit-learn's
	// layout).
	ClassNames []string
}

// Inspect reads the data set at path and summarises it. It detects gzip and
// the format as Open does and infers the classes the same way, but it reads
// a LIBSVM file in one streaming pass without building the matrix, so its
// memory does not grow with the file.
func Inspect(path string) (Info, error) { return InspectOptions(path, OpenOptions{}) }

// InspectOptions is Inspect with the options Open would read the file with
// (a CSV file's label column, ...).
func InspectOptions(path string, opts OpenOptions) (Info, error) {
	src, err := openSource(path)
	if err != nil {
		return Info{}, err
	}
	defer src.Close()
	format := src.formatFor(opts)
	if err := csvOnly(format, opts); err != nil {
		return Info{}, fmt.Errorf("%s: %w", path, err)
	}
	info := Info{Path: path, Format: format, Gzip: src.gzip}
	switch format {
	case FormatLIBSVM:
		p, err := newLIBSVMReader(src.r, opts.LIBSVM)
		if err != nil {
			return Info{}, fmt.Errorf("%s: %w", path, err)
		}
		for {
			_, ok, err := p.next()
			if err != nil {
				return Info{}, fmt.Errorf("%s: %w", path, err)
			}
			if !ok {
				break
			}
			info.Samples++
			info.NNZ += p.rowLen
			p.idx, p.val = p.idx[:0], p.val[:0]
		}
		info.LabelValues, _ = p.classes()
		info.ClassCounts = p.counts
		info.Classes = len(info.LabelValues)
		info.Features = p.maxCol
		info.Label = "the first token of each line (LIBSVM)"
	case FormatParty:
		p, err := ReadPartyFile(src.r)
		if err != nil {
			return Info{}, fmt.Errorf("%s: %w", path, err)
		}
		info.Samples, info.Features, info.NNZ = len(p.IDs), p.X.NCols, p.X.NNZ()
		info.Label = fmt.Sprintf("none: party %d of %d holds columns [%d,%d) of %d, no labels (labels.%s.gz holds them)",
			p.Party, p.Parties, p.Lo, p.Hi, p.Features, p.Split)
		info.ID = "the first token of each line (the sample id)"
	case FormatLabels:
		l, err := ReadLabels(src.r)
		if err != nil {
			return Info{}, fmt.Errorf("%s: %w", path, err)
		}
		info.Samples, info.Classes, info.LabelValues = len(l.IDs), l.Classes, l.LabelValues
		info.ClassCounts = make([]int, l.Classes)
		for _, y := range l.Y {
			info.ClassCounts[y]++
		}
		info.Label = fmt.Sprintf("the aggregator's labels of the %s set, no features", l.Split)
		info.ID = "the first token of each line (the sample id)"
		return info, nil
	case FormatCSV:
		d, t, err := readCSV(src.r, opts.CSV)
		if err != nil {
			return Info{}, fmt.Errorf("%s: %w", path, err)
		}
		info = summarise(path, src.gzip, d)
		info.Missing = t.count(opts.CSV.Missing)
		info.Label = fmt.Sprintf("column %d %q: %s", t.labelCol, t.label, t.labelWhy)
		if t.idCol >= 0 {
			info.ID = fmt.Sprintf("column %d %q: %s", t.idCol, t.header[t.idCol], t.idWhy)
		}
		return info, nil
	default:
		// Formats without a streaming summary are loaded whole; Open
		// reports those it cannot read.
		d, err := Open(path, opts)
		if err != nil {
			return Info{}, err
		}
		info = summarise(path, src.gzip, d)
		if d.Format == FormatIDX {
			info.Label = "the labels file of the folder (IDX)"
		}
		return info, nil
	}
	if cells := float64(info.Samples) * float64(info.Features); cells > 0 {
		info.Density = float64(info.NNZ) / cells
	}
	return info, nil
}

// Summarise describes a data set that is already in memory (its Path is
// its name).
func Summarise(d *Dataset) Info { return summarise(d.Name, false, d) }

// summarise describes a data set that is already in memory.
func summarise(path string, gzip bool, d *Dataset) Info {
	info := Info{
		Path:        path,
		Format:      d.Format,
		Gzip:        gzip,
		Samples:     d.Len(),
		Features:    d.X.NCols,
		Classes:     d.Classes,
		ClassCounts: make([]int, d.Classes),
		LabelValues: d.LabelValues,
		NNZ:         d.X.NNZ(),
		ClassNames:  d.ClassNames,
	}
	for _, y := range d.Y {
		info.ClassCounts[y]++
	}
	if cells := float64(info.Samples) * float64(info.Features); cells > 0 {
		info.Density = float64(info.NNZ) / cells
	}
	return info
}

// String gives a short report, one item a line, such as
//
//	path:      a9a.gz
//	format:    libsvm (gzip)
//	samples:   32561
//	features:  123
//	classes:   2
//	  -1:      24720 (75.92%)
//	  +1:      7841 (24.08%)
//	non-zeros: 451592 (density 0.1128)
func (in Info) String() string {
	const maxShown = 20
	var b strings.Builder
	format := in.Format
	if format == "" {
		format = "unknown"
	}
	if in.Gzip {
		format += " (gzip)"
	}
	fmt.Fprintf(&b, "path:      %s\n", in.Path)
	fmt.Fprintf(&b, "format:    %s\n", format)
	fmt.Fprintf(&b, "samples:   %d\n", in.Samples)
	fmt.Fprintf(&b, "features:  %d\n", in.Features)
	fmt.Fprintf(&b, "classes:   %d\n", in.Classes)
	if in.Label != "" {
		fmt.Fprintf(&b, "label:     %s\n", in.Label)
	}
	if in.ID != "" {
		fmt.Fprintf(&b, "id:        %s\n", in.ID)
	}
	for c := range min(len(in.ClassCounts), maxShown) {
		label := strconv.Itoa(c)
		if c < len(in.LabelValues) {
			label = labelText(in.LabelValues, c)
		}
		if c < len(in.ClassNames) {
			label += " " + in.ClassNames[c]
		}
		share := 0.0
		if in.Samples > 0 {
			share = 100 * float64(in.ClassCounts[c]) / float64(in.Samples)
		}
		fmt.Fprintf(&b, "  %-8s %d (%.2f%%)\n", label+":", in.ClassCounts[c], share)
	}
	if n := len(in.ClassCounts) - maxShown; n > 0 {
		fmt.Fprintf(&b, "  ... and %d more classes\n", n)
	}
	fmt.Fprintf(&b, "non-zeros: %d (density %.4g)\n", in.NNZ, in.Density)
	switch {
	case in.Missing.Cells > 0 && in.MissingUndecided:
		fmt.Fprintf(&b, "missing:   %s\n", in.Missing.Undecided())
	case in.Missing.Cells > 0:
		fmt.Fprintf(&b, "missing:   %s\n", in.Missing)
	}
	return b.String()
}
