package align

import (
	"compress/gzip"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/internal/atomicfile"
)

// IDText is how a normalised key is written as a sample id in a split
// folder: bytes that a sample id may not hold (white space, control
// characters, '#') and '%' become %XX, so the text is one token and
// distinct keys stay distinct. The cells of a composite key are joined by
// %1F.
func IDText(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c <= ' ' || c == '#' || c == '%' || c == 0x7f {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// OrderDigest is the SHA-256 (hex) of a list of sample ids in order, each
// followed by a newline: two organisations hold the same rows in the same
// order exactly when their digests agree, and they can compare digests
// without showing each other a single id.
func OrderDigest(ids []string) string {
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// RecordFile is the name of the alignment record in a split folder that
// asyrevel align wrote.
const RecordFile = "align.json"

// Record is what an organisation keeps of an alignment: the sizes it
// learnt and the digest of its rows' order (OrderDigest of the ids it
// wrote). Organisations compare records (asyrevel data verify) to check
// that they agree on the order.
type Record struct {
	Format       string  `json:"format"` // "asyrevel-align"
	Run          string  `json:"run"`
	Spec         string  `json:"spec"`
	Organisation string  `json:"organisation"` // aggregator, party-M
	File         string  `json:"file"`         // the file it wrote
	Samples      int     `json:"samples"`      // rows of the intersection
	Own          int     `json:"own"`          // rows it brought
	Dropped      int     `json:"dropped_duplicates,omitempty"`
	HubSize      int     `json:"hub_size,omitempty"`    // a party learns the hub's size
	PartySizes   []int   `json:"party_sizes,omitempty"` // the hub learns the parties' sizes
	OrderSHA256  string  `json:"order_sha256"`
	Lo           int     `json:"lo"`
	Hi           int     `json:"hi"`
	Features     int     `json:"features"`
	Parties      int     `json:"parties"`
	Stats        Stats   `json:"stats"`
	WireBytesID  float64 `json:"wire_bytes_per_id"` // bytes it sent per own id
}

func newRecord(run, spec string, m int, t *Table, r *Result, ids []string, file string) Record {
	rec := Record{Format: "asyrevel-align", Run: run, Spec: spec, Organisation: orgName(m), File: file,
		Samples: len(r.Rows), Own: t.Len(), Dropped: t.Dropped, OrderSHA256: OrderDigest(ids),
		Lo: r.Lo, Hi: r.Lo + t.X.NCols, Features: r.Features, Parties: r.Parties, Stats: r.Stats,
		WireBytesID: float64(r.Stats.BytesSent) / float64(t.Len())}
	if m == 0 {
		rec.PartySizes, rec.Lo, rec.Hi = r.PartySizes, 0, 0
	} else {
		rec.HubSize = r.HubSize
	}
	return rec
}

// ids are an organisation's keys of the intersection, as written.
func ids(t *Table, r *Result) []string {
	out := make([]string, len(r.Rows))
	for k, row := range r.Rows {
		out[k] = IDText(t.Keys[row])
	}
	return out
}

// labelled makes the hub's labels of rows: classes are the distinct
// label values in increasing order.
func labelled(t *Table, rows []int, idList []string) *dataset.Dataset {
	vals := make([]float64, 0, 8)
	for _, r := range rows {
		vals = append(vals, t.Labels[r])
	}
	values := slices.Compact(slices.Sorted(slices.Values(vals)))
	y := make([]int32, len(rows))
	for k, v := range vals {
		c, _ := slices.BinarySearch(values, v)
		y[k] = int32(c)
	}
	return &dataset.Dataset{Name: "aligned", Format: "csv", Y: y, Classes: len(values), LabelValues: values, IDs: idList,
		X: &dataset.Matrix{NRows: len(rows), Indptr: make([]int64, len(rows)+1)}}
}

// WriteFolder writes the in-process alignment as a split folder that
// asyrevel train --data takes as it is: labels.train.gz from the hub,
// party-M.train.gz from party M (its rows of the intersection, in the
// common order, its columns at [Lo, Hi) of the joint set), manifest.json,
// and align.json with every organisation's record.
//
// With holdout.Fraction > 0 a share of the aligned rows (positions in the
// common order drawn with holdout.Seed, the same for every organisation)
// becomes the test set (labels.test.gz, party-M.test.gz).
func WriteFolder(dir, run, spec string, tables []*Table, res []*Result, holdout dataset.TestSplit) (*dataset.SplitManifest, []Record, error) {
	q := len(tables) - 1
	if len(res) != q+1 || q < 1 {
		return nil, nil, fmt.Errorf("%w: %d tables and %d results", ErrConfig, len(tables), len(res))
	}
	hubIDs := ids(tables[0], res[0])
	var records []Record
	records = append(records, newRecord(run, spec, 0, tables[0], res[0], hubIDs, dataset.LabelsFileName("train")))
	d := labelled(tables[0], res[0].Rows, hubIDs)
	blocks := make([]dataset.Block, q)
	parts := make([]*dataset.Matrix, q)
	var names []dataset.EncodedColumn
	for m := 1; m <= q; m++ {
		t, r := tables[m], res[m]
		pid := ids(t, r)
		if !slices.Equal(pid, hubIDs) {
			return nil, nil, fmt.Errorf("align: %s's rows are not in the hub's order (digest %s, the hub's %s)", orgName(m), OrderDigest(pid), OrderDigest(hubIDs))
		}
		blocks[m-1] = dataset.Block{Lo: r.Lo, Hi: r.Lo + t.X.NCols}
		parts[m-1] = t.X.Rows(r.Rows)
		for _, n := range t.Names {
			names = append(names, dataset.EncodedColumn{Name: n})
		}
		records = append(records, newRecord(run, spec, m, t, r, pid, dataset.PartyFileName(m, "train")))
	}
	d.X = joinColumns(parts, blocks, len(hubIDs))
	d.Encoding = &dataset.Encoding{Columns: names}
	paths := make([]string, len(tables))
	for i, t := range tables {
		paths[i] = t.Path
	}
	var test *dataset.Dataset
	if holdout.Fraction > 0 {
		var err error
		if d, test, err = dataset.TrainTestSplit(d, holdout); err != nil {
			return nil, nil, err
		}
		test.LabelValues = d.LabelValues
	}
	man, err := dataset.WriteSplitBlocks(dir, blocks, d, test, dataset.SplitSource{Train: strings.Join(paths, ",")})
	if err != nil {
		return nil, nil, err
	}
	if err := WriteKeys(dir, tables[0], res[0].Rows); err != nil {
		return nil, nil, err
	}
	js, err := json.MarshalIndent(records, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, RecordFile), append(js, '\n'), 0o644); err != nil {
		return nil, nil, fmt.Errorf("align: %w", err)
	}
	return man, records, nil
}

// KeysFile is the label holder's record, in a folder that asyrevel align
// wrote, of its keys as its file writes them: for every sample id of the
// folder, the key as written and its row in the file. Predictions and the
// service report rows by these keys, in the file's order.
const KeysFile = "keys.csv.gz"

// KeyRow is one row of KeysFile.
type KeyRow struct {
	Written string // the key as the label holder's file writes it
	Row     int    // its 0-based data row in that file
}

// WriteKeys writes the KeysFile of t's rows (positions in t) into dir.
func WriteKeys(dir string, t *Table, rows []int) error {
	if t.Written == nil {
		return nil // a table read before keys were kept
	}
	path := filepath.Join(dir, KeysFile)
	// Mode 0600: the keys are the data's own identifiers.
	err := atomicfile.Write(path, 0o600, func(f io.Writer) error {
		zw := gzip.NewWriter(f)
		w := csv.NewWriter(zw)
		w.Write([]string{"id", "row", "key"})
		for _, r := range rows {
			w.Write([]string{IDText(t.Keys[r]), strconv.Itoa(int(t.Source[r])), t.Written[r]})
		}
		w.Flush()
		return errors.Join(w.Error(), zw.Close())
	})
	if err != nil {
		return fmt.Errorf("align: writing %s: %w", path, err)
	}
	return nil
}

// ReadKeys reads dir's KeysFile: the keys as written by sample id. A
// folder without one (not asyrevel align's, or the label holder's keys
// not kept) gives nil and no error.
func ReadKeys(dir string) (map[string]KeyRow, error) {
	f, err := os.Open(filepath.Join(dir, KeysFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("align: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("align: %s: %w", KeysFile, err)
	}
	r := csv.NewReader(zr)
	r.FieldsPerRecord = 3
	keys := map[string]KeyRow{}
	for line := 1; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			return keys, nil
		}
		if err != nil {
			return nil, fmt.Errorf("align: %s: %w", KeysFile, err)
		}
		if line == 1 {
			continue
		}
		row, err := strconv.Atoi(rec[1])
		if err != nil || row < 0 {
			return nil, fmt.Errorf("align: %s: line %d: row %q", KeysFile, line, rec[1])
		}
		keys[rec[0]] = KeyRow{Written: rec[2], Row: row}
	}
}

// SpecOf reads a folder's key specification from its align.json: the
// rules that make a key as written the sample id the folder holds
// (Resolver). ok is false for a folder that asyrevel align did not write.
func SpecOf(dir string) (spec string, ok bool, err error) {
	recs, err := ReadRecords(filepath.Join(dir, RecordFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if len(recs) == 0 {
		return "", false, fmt.Errorf("align: %s: no record", filepath.Join(dir, RecordFile))
	}
	return recs[0].Spec, true, nil
}

// Resolver turns a key as an organisation writes it into the sample id an
// alignment of spec gave its row: the spec's normalisation, then IDText.
// A composite key is given as its cells joined by ",". A key that does
// not normalise (empty) is returned as it is, to be found by no one.
func Resolver(spec string) (func(string) string, error) {
	n, cols, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	return KeyResolver(n, cols), nil
}

// KeyResolver is Resolver for the rules n of a key of cols columns.
func KeyResolver(n Normalization, cols int) func(string) string {
	return func(key string) string {
		cells := []string{key}
		if cols > 1 {
			cells = strings.Split(key, ",")
		}
		k, err := n.Key(cells)
		if err != nil {
			return key
		}
		return IDText(k)
	}
}

// joinColumns puts the parties' rows side by side.
func joinColumns(parts []*dataset.Matrix, blocks []dataset.Block, rows int) *dataset.Matrix {
	nnz := 0
	for _, p := range parts {
		nnz += p.NNZ()
	}
	width := 0
	if len(blocks) > 0 {
		width = blocks[len(blocks)-1].Hi
	}
	x := &dataset.Matrix{NRows: rows, NCols: width, Indptr: make([]int64, 1, rows+1),
		Indices: make([]int32, 0, nnz), Values: make([]float32, 0, nnz)}
	for i := range rows {
		for m, p := range parts {
			idx, val := p.Row(i)
			for k, j := range idx {
				x.Indices = append(x.Indices, j+int32(blocks[m].Lo))
				x.Values = append(x.Values, val[k])
			}
		}
		x.Indptr = append(x.Indptr, int64(len(x.Indices)))
	}
	return x
}

// WriteOwn writes one organisation's part of the split (the one-process
// form): the hub its labels file, party M its party file, at path, and
// its record next to it (path + ".align.json").
func WriteOwn(path, run, spec string, m int, t *Table, r *Result) (*Record, error) {
	idList := ids(t, r)
	dir, name := filepath.Dir(path), filepath.Base(path)
	var err error
	if m == 0 {
		_, err = dataset.WriteLabelsFile(dir, name, "train", labelled(t, r.Rows, idList))
	} else {
		h := dataset.PartyHeader{Split: "train", Party: m, Parties: r.Parties, Lo: r.Lo, Hi: r.Lo + t.X.NCols,
			Features: r.Features, Samples: len(r.Rows), Names: t.Names}
		_, err = dataset.WritePartyFile(dir, name, h, idList, t.X.Rows(r.Rows))
	}
	if err != nil {
		return nil, err
	}
	rec := newRecord(run, spec, m, t, r, idList, name)
	js, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path+".align.json", append(js, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("align: %w", err)
	}
	return &rec, nil
}

// OwnFolderSource marks the manifest of a folder that holds one
// organisation's part of a split (WriteOwnFolder): its SplitSource.Train.
const OwnFolderSource = "asyrevel align, one organisation's part: "

// WriteOwnFolder writes one organisation's part of the split as a folder
// of its own that asyrevel aggregator --data (the hub's) or party --data
// (party M's) takes as it is: its file (labels.train.gz, or
// party-M.train.gz with its columns at [Lo, Hi) of the joint set),
// manifest.json with the whole split's layout (q, the joint width, every
// party's block, the classes: what the hub's layout message told it) and
// only its own file listed, and align.json, its record (a list of one).
// A run's organisations agree on the order exactly when their records'
// digests agree (CheckFolders).
func WriteOwnFolder(dir, run, spec string, m int, t *Table, r *Result) (*dataset.SplitManifest, *Record, error) {
	q := r.Parties
	if q < 1 || len(r.Widths) != q || (m > 0 && (m > q || r.Widths[m-1] != t.X.NCols)) {
		return nil, nil, fmt.Errorf("%w: %s's result lays out %d parties with widths %v", ErrConfig, orgName(m), q, r.Widths)
	}
	if r.Classes < 1 {
		return nil, nil, fmt.Errorf("%w: the hub told no number of classes (it was given no labels)", ErrConfig)
	}
	blocks := make([]dataset.Block, q)
	lo := 0
	for i, w := range r.Widths {
		blocks[i] = dataset.Block{Lo: lo, Hi: lo + w}
		lo += w
	}
	if lo != r.Features {
		return nil, nil, fmt.Errorf("%w: widths %v make %d columns, the result %d", ErrConfig, r.Widths, lo, r.Features)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("align: %w", err)
	}
	idList := ids(t, r)
	man := &dataset.SplitManifest{Format: "asyrevel-split", Version: 1, Q: q, Features: r.Features, Classes: r.Classes,
		Blocks: blocks, Source: dataset.SplitSource{Train: OwnFolderSource + orgName(m) + " of run " + run}}
	set := dataset.SplitSet{Split: "train", Samples: len(r.Rows)}
	var e dataset.ManifestEntry
	var err error
	name := dataset.LabelsFileName("train")
	if m == 0 {
		d := labelled(t, r.Rows, idList)
		if d.Classes != r.Classes {
			return nil, nil, fmt.Errorf("align: the hub's labels have %d classes, its result %d", d.Classes, r.Classes)
		}
		man.LabelValues = d.LabelValues
		set.ClassCounts = make([]int, d.Classes)
		for _, y := range d.Y {
			set.ClassCounts[y]++
		}
		if e, err = dataset.WriteLabelsFile(dir, name, "train", d); err == nil {
			err = WriteKeys(dir, t, r.Rows)
		}
	} else {
		name = dataset.PartyFileName(m, "train")
		h := dataset.PartyHeader{Split: "train", Party: m, Parties: q, Lo: r.Lo, Hi: r.Lo + t.X.NCols,
			Features: r.Features, Samples: len(r.Rows), Names: t.Names}
		e, err = dataset.WritePartyFile(dir, name, h, idList, t.X.Rows(r.Rows))
	}
	if err != nil {
		return nil, nil, err
	}
	man.Sets, man.Files = []dataset.SplitSet{set}, []dataset.ManifestEntry{e}
	rec := newRecord(run, spec, m, t, r, idList, name)
	js, err := json.MarshalIndent([]Record{rec}, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, RecordFile), append(js, '\n'), 0o644); err != nil {
		return nil, nil, fmt.Errorf("align: %w", err)
	}
	// The manifest last: a folder with a manifest is complete.
	if err := dataset.WriteManifest(dir, man); err != nil {
		return nil, nil, err
	}
	return man, &rec, nil
}

// IsOwnFolder reports whether dir holds one organisation's part of a
// split (WriteOwnFolder): a manifest that lists fewer files than the
// split has, and an alignment record.
func IsOwnFolder(dir string) bool {
	man, err := dataset.ReadManifest(dir)
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(dir, RecordFile))
	return err == nil && len(man.Files) < len(man.Sets)*(man.Q+1)
}

// FolderCheck is what CheckFolder found in one organisation's folder.
type FolderCheck struct {
	Dir      string
	Record   Record
	Manifest *dataset.SplitManifest
}

// CheckFolder checks one organisation's folder on its own: its file
// against the manifest (size, SHA-256) and its ids, in order, against the
// digest in its record. It never needs another organisation's file.
func CheckFolder(dir string) (*FolderCheck, error) {
	man, err := dataset.ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	if err := man.Verify(dir); err != nil {
		return nil, err
	}
	recs, err := ReadRecords(filepath.Join(dir, RecordFile))
	if err != nil {
		return nil, err
	}
	if len(recs) != 1 || len(man.Files) != 1 {
		return nil, fmt.Errorf("align: %s: %d records and %d files: not one organisation's folder", dir, len(recs), len(man.Files))
	}
	rec, e := recs[0], man.Files[0]
	if e.Name != rec.File || e.Samples != rec.Samples {
		return nil, fmt.Errorf("align: %s: the record names %s of %d rows, the manifest %s of %d", dir, rec.File, rec.Samples, e.Name, e.Samples)
	}
	var idList []string
	switch e.Kind {
	case "labels":
		l, err := dataset.LoadLabels(filepath.Join(dir, e.Name))
		if err != nil {
			return nil, err
		}
		if l.Classes != man.Classes {
			return nil, fmt.Errorf("%w: %s: %d classes, the manifest says %d", dataset.ErrMismatch, e.Name, l.Classes, man.Classes)
		}
		idList = l.IDs
	case "party":
		p, err := dataset.LoadPartyFile(filepath.Join(dir, e.Name))
		if err != nil {
			return nil, err
		}
		if p.Party < 1 || p.Party > man.Q || p.Parties != man.Q || p.Block() != man.Blocks[p.Party-1] || p.Features != man.Features {
			return nil, fmt.Errorf("%w: %s is party %d of %d with columns [%d,%d) of %d, the manifest lays out %d parties %v of %d",
				dataset.ErrMismatch, e.Name, p.Party, p.Parties, p.Lo, p.Hi, p.Features, man.Q, man.Blocks, man.Features)
		}
		idList = p.IDs
	default:
		return nil, fmt.Errorf("%w: %s: a file of kind %q", dataset.ErrFormat, e.Name, e.Kind)
	}
	if got := OrderDigest(idList); got != rec.OrderSHA256 {
		return nil, fmt.Errorf("align: %s: its ids' order digest is %s, its record says %s", dir, got, rec.OrderSHA256)
	}
	return &FolderCheck{Dir: dir, Record: rec, Manifest: man}, nil
}

// CheckFolders compares the organisations' folders of one alignment
// (each checked by CheckFolder): their records agree on the run, the
// number of rows and the order digest (CheckRecords), their manifests on
// the layout (parties, blocks, joint width, classes), and no organisation
// appears twice. Only digests and sizes are compared: no id.
func CheckFolders(checks []*FolderCheck) error {
	recs := make([]Record, len(checks))
	seen := map[string]string{}
	for i, c := range checks {
		recs[i] = c.Record
		if d, dup := seen[c.Record.Organisation]; dup {
			return fmt.Errorf("align: %s and %s are both %s's", d, c.Dir, c.Record.Organisation)
		}
		seen[c.Record.Organisation] = c.Dir
	}
	if err := CheckRecords(recs); err != nil {
		return err
	}
	a := checks[0].Manifest
	for _, c := range checks[1:] {
		b := c.Manifest
		if b.Q != a.Q || b.Features != a.Features || b.Classes != a.Classes || !slices.Equal(b.Blocks, a.Blocks) {
			return fmt.Errorf("align: %s lays out %d parties %v of %d columns and %d classes, %s %d parties %v of %d columns and %d classes",
				c.Dir, b.Q, b.Blocks, b.Features, b.Classes, checks[0].Dir, a.Q, a.Blocks, a.Features, a.Classes)
		}
	}
	return nil
}

// ReadRecords reads align records: a folder's align.json (a list) or one
// organisation's FILE.align.json (one record).
func ReadRecords(path string) ([]Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("align: %w", err)
	}
	var list []Record
	if err := json.Unmarshal(b, &list); err != nil {
		var one Record
		if err2 := json.Unmarshal(b, &one); err2 != nil {
			return nil, fmt.Errorf("align: %s: %w", path, err)
		}
		list = []Record{one}
	}
	for _, r := range list {
		if r.Format != "asyrevel-align" {
			return nil, fmt.Errorf("align: %s: format %q, want asyrevel-align", path, r.Format)
		}
	}
	return list, nil
}

// CheckRecords checks that records of one run agree: the same run, spec,
// number of samples and order digest. The error names who differs.
func CheckRecords(recs []Record) error {
	if len(recs) < 2 {
		return fmt.Errorf("align: %d records: need two organisations' to compare", len(recs))
	}
	a := recs[0]
	for _, b := range recs[1:] {
		switch {
		case b.Run != a.Run:
			return fmt.Errorf("align: %s's record is of run %s, %s's of run %s", b.Organisation, b.Run, a.Organisation, a.Run)
		case b.Samples != a.Samples:
			return fmt.Errorf("align: %s holds %d rows, %s %d", b.Organisation, b.Samples, a.Organisation, a.Samples)
		case b.OrderSHA256 != a.OrderSHA256:
			return fmt.Errorf("align: %s's order digest %s differs from %s's %s: their rows are not in one order", b.Organisation, b.OrderSHA256, a.Organisation, a.OrderSHA256)
		}
	}
	return nil
}

// ParseSpec reads the number of key columns and the normalisation rules
// back from a specification that Spec wrote.
func ParseSpec(spec string) (Normalization, int, error) {
	var n Normalization
	cols := 0
	parts := strings.Split(spec, ";")
	if len(parts) < 4 || parts[0] != ProtocolVersion {
		return n, 0, fmt.Errorf("align: key specification %q: not %s's", spec, ProtocolVersion)
	}
	if _, err := fmt.Sscanf(parts[2], "columns=%d", &cols); err != nil || cols < 1 {
		return n, 0, fmt.Errorf("align: key specification %q: no column count", spec)
	}
	for _, kv := range strings.Split(parts[3], ",") {
		switch kv {
		case "space=keep":
			n.KeepSpace = true
		case "case=keep":
			n.KeepCase = true
		case "zeros=strip":
			n.StripZeros = true
		case "space=trim", "case=fold", "zeros=keep":
		default:
			return n, 0, fmt.Errorf("align: key specification %q: unknown rule %q", spec, kv)
		}
	}
	return n, cols, nil
}
