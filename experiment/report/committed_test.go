package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// results is the repository's committed results folder.
var results = filepath.Join("..", "..", "results")

// The committed report is what `asyrevel experiment report` writes from the
// committed CSV files: a hand edit of REPORT.md or REPORT-privacy.md, or a
// CSV file changed without writing the report again, fails here.
func TestCommittedReport(t *testing.T) {
	g, err := generate(results)
	if err != nil {
		t.Fatalf("the committed CSV files: %v", err)
	}
	for _, name := range g.files.Names() {
		path := filepath.Join(results, name)
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s is not committed (run: asyrevel experiment report): %v", path, err)
			continue
		}
		if !strings.HasSuffix(name, ".md") {
			continue // plots: their presence only (the PNG encoder's bytes are the toolchain's)
		}
		if want := g.files[name]; !bytes.Equal(got, want) {
			t.Errorf("%s differs from what `asyrevel experiment report` writes from the CSV files (edited by hand, or a CSV changed "+
				"without the report): %s", path, firstDifference(want, got))
		}
	}
	// Every report file and plot in the folder is one the command writes,
	// and every CSV file is read by a section.
	entries, err := os.ReadDir(results)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		switch filepath.Ext(name) {
		case ".md", ".png":
			if _, ok := g.files[name]; !ok {
				t.Errorf("results/%s is not written by `asyrevel experiment report`: remove it, or render it from a CSV file", name)
			}
		case ".csv":
			if _, ok := g.tables[name]; !ok && name != RunsFile {
				t.Errorf("results/%s is not read by any section of the report", name)
			}
		default:
			t.Errorf("results/%s: the folder holds CSV files, runs.csv and the report's files only", name)
		}
	}
}

// firstDifference says where want and got first differ, by line.
func firstDifference(want, got []byte) string {
	w, g := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := range max(len(w), len(g)) {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return "line " + strconv.Itoa(i+1) + ": generated\n\t" + a + "\ncommitted\n\t" + b
		}
	}
	return "lengths differ"
}
