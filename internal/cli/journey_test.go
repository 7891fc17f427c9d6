package cli

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// docBlock is a fenced code block of a Markdown page.
type docBlock struct {
	lang string
	line int // 1-based line of its first line
	text string
}

// fencedBlocks reads the fenced code blocks of docs/NAME.
func fencedBlocks(t *testing.T, name string) []docBlock {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	f, err := os.Open(filepath.Join(filepath.Dir(file), "..", "..", "docs", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []docBlock
	var cur *docBlock
	var lines []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &docBlock{lang: strings.TrimPrefix(line, "```"), line: n + 1}
			lines = nil
		case cur != nil && line == "```":
			cur.text = strings.Join(joinContinued(lines), "\n")
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			lines = append(lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return blocks
}

// journeyCustomer is one customer of the journey's files: the bank's,
// the telecom operator's and the retailer's columns, and whether it left.
type journeyCustomer struct {
	id                string
	balance, products float64
	minutes, spend    float64
	age               float64
	segment           string
	churned           int
}

// writeJourneyFiles writes the journey's files into dir: 1,200 customers
// of the bank (bank.csv, with churned) and 150 new ones (bank_new.csv,
// without), the telecom operator's and the retailer's files of most of
// them and of customers of their own, their ids written three ways, some
// of the telecom's spend cells empty and the retailer's segment a text
// column. Whether a customer left depends on every organisation's
// columns, the bank's included.
func writeJourneyFiles(t *testing.T, dir string) {
	t.Helper()
	r := rand.New(rand.NewPCG(34, 3))
	segments := []string{"urban", "suburban", "rural"}
	customer := func(i int) journeyCustomer {
		z := [5]float64{}
		for j := range z {
			z[j] = r.NormFloat64()
		}
		seg := r.IntN(3)
		c := journeyCustomer{id: fmt.Sprintf("CUST-%05d", i),
			balance: 1000 + 400*z[0], products: float64(1 + r.IntN(4)),
			minutes: 300 + 90*z[1], spend: 60 + 25*z[2], age: 45 + 12*z[3], segment: segments[seg]}
		s := -1.3*z[0] + 0.6*(2.5-c.products) + 1.1*z[1] - 0.9*z[2] - 0.5*z[3] + []float64{0.6, 0, -0.6}[seg] + 0.5*z[4]
		if s > 0 {
			c.churned = 1
		}
		return c
	}
	type files struct{ bank, telecom, retail strings.Builder }
	var old, fresh files
	for _, f := range []*files{&old, &fresh} {
		f.telecom.WriteString("customer_id,minutes,spend\n")
		f.retail.WriteString("customer_id,age,segment\n")
	}
	old.bank.WriteString("customer_id,churned,balance,products\n")
	fresh.bank.WriteString("customer_id,balance,products\n")
	for i := range 1350 {
		c := customer(i)
		f := &old
		if i >= 1200 {
			f = &fresh
			fmt.Fprintf(&f.bank, "%s,%.2f,%.0f\n", c.id, c.balance, c.products)
		} else {
			fmt.Fprintf(&f.bank, "%s,%d,%.2f,%.0f\n", c.id, c.churned, c.balance, c.products)
		}
		if i%29 != 7 { // the telecom lacks a few of the bank's customers
			spend := fmt.Sprintf("%.2f", c.spend)
			if i%37 == 5 {
				spend = ""
			}
			fmt.Fprintf(&f.telecom, "%s,%.1f,%s\n", strings.ToLower(c.id), c.minutes, spend)
		}
		if i%31 != 11 { // and so does the retailer
			fmt.Fprintf(&f.retail, "\" %s \",%.1f,%s\n", c.id, c.age, c.segment)
		}
		if i%5 == 0 { // customers the bank does not know
			fmt.Fprintf(&f.telecom, "tel-%05d,%.1f,%.2f\n", i, 300+90*r.NormFloat64(), 60+25*r.NormFloat64())
			fmt.Fprintf(&f.retail, "RET-%05d,%.1f,%s\n", i, 45+12*r.NormFloat64(), segments[r.IntN(3)])
		}
	}
	for name, b := range map[string]*strings.Builder{
		"bank.csv": &old.bank, "telecom.csv": &old.telecom, "retail.csv": &old.retail,
		"bank_new.csv": &fresh.bank, "telecom_new.csv": &fresh.telecom, "retail_new.csv": &fresh.retail,
	} {
		must(t, os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644))
	}
}

// readCSVFile reads a whole CSV file, plain or (.gz) gzip.
func readCSVFile(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	recs, err := csv.NewReader(r).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return recs
}

// TestJourney runs the commands of docs/journey.md, its sh blocks in
// order, one shell script a block in one folder, on files like the page's
// that writeJourneyFiles writes: align, train, predict on the held-out
// rows and on new customers, serve. Then it checks what the page
// promises: the label holder's columns are a party's block, the
// predictions carry the bank's ids as written in its file's order (with
// the true label where there is one), the new customers are scored from
// their own files, and the service answers an id as the bank writes it.
func TestJourney(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	bin := testBinary(t)
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	must(t, os.Symlink(bin, filepath.Join(dir, "bin", "asyrevel")))
	writeJourneyFiles(t, dir)
	port := strconv.Itoa(freePort(t))
	ran := 0
	var all strings.Builder
	for _, b := range fencedBlocks(t, "journey.md") {
		if b.lang != "sh" {
			continue
		}
		script := regexp.MustCompile(`\b8080\b`).ReplaceAllString(b.text, port)
		// Background jobs (the service) end with the block.
		script = "set -e -o pipefail\n" + script + "\nkill $(jobs -p) 2>/dev/null || true; wait\n"
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("docs/journey.md:%d: the block failed: %v\n--- script\n%s\n--- output\n%s", b.line, err, script, out)
		}
		all.Write(out)
		ran++
	}
	if ran < 5 {
		t.Fatalf("only %d blocks of docs/journey.md ran", ran)
	}
	text := all.String()
	for _, want := range []string{
		"the label holder's 2 feature columns (balance, products) are party 3's block",
		"telecom.csv: 32 missing values in 32 rows, read as 0",
		"3 parties (the split folder's manifest",
		"label privacy (--privacy auc=0.6",
		"leakage: nothing to measure on this run",
		"scoring the test set of aligned",
		"not scored: ",
		`"id":"CUST-00099"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the journey's output lacks %q:\n%s", want, text)
		}
	}
	// The bank's rows, in its file's order, with their labels.
	bank := readCSVFile(t, filepath.Join(dir, "bank.csv"))
	row := map[string]int{}
	label := map[string]string{}
	for i, rec := range bank[1:] {
		row[rec[0]], label[rec[0]] = i, rec[1]
	}
	held := readCSVFile(t, filepath.Join(dir, "heldout.csv"))
	if !slices.Equal(held[0], []string{"id", "label", "predicted", "p_0", "p_1"}) || len(held) < 100 {
		t.Fatalf("heldout.csv: header %q, %d lines", held[0], len(held))
	}
	last := -1
	for _, rec := range held[1:] {
		i, ok := row[rec[0]]
		if !ok {
			t.Fatalf("heldout.csv: id %q is not one of bank.csv's ids as written", rec[0])
		}
		if i <= last {
			t.Fatalf("heldout.csv: %s (bank.csv row %d) after row %d: not in bank.csv's order", rec[0], i, last)
		}
		last = i
		if rec[1] != label[rec[0]] {
			t.Errorf("heldout.csv: %s has label %s, bank.csv %s", rec[0], rec[1], label[rec[0]])
		}
		p0, _ := strconv.ParseFloat(rec[3], 64)
		p1, _ := strconv.ParseFloat(rec[4], 64)
		if math.Abs(p0+p1-1) > 1e-6 || (rec[2] == "1") != (p1 > p0) {
			t.Errorf("heldout.csv: %q: predicted and probabilities disagree", rec)
		}
	}
	// The new customers: bank_new.csv's ids, in its order, those that
	// every organisation holds.
	fresh := readCSVFile(t, filepath.Join(dir, "bank_new.csv"))
	var want []string
	for i, rec := range fresh[1:] {
		if c := 1200 + i; c%29 != 7 && c%31 != 11 {
			want = append(want, rec[0])
		}
	}
	scored := readCSVFile(t, filepath.Join(dir, "new.csv"))
	if !slices.Equal(scored[0], []string{"id", "predicted", "p_0", "p_1"}) {
		t.Fatalf("new.csv: header %q", scored[0])
	}
	var got []string
	for _, rec := range scored[1:] {
		got = append(got, rec[0])
	}
	if !slices.Equal(got, want) {
		t.Errorf("new.csv: ids %q..., want %q... (%d and %d)", got[:min(3, len(got))], want[:3], len(got), len(want))
	}
}
