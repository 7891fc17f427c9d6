package cli

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"io"
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

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/internal/freeport"
)

// readmeBlock is an indented code block of README.md.
type readmeBlock struct {
	section string // the "## " heading it is under
	line    int    // 1-based line of its first line
	lines   []string
}

// script is the block as a shell script, with continuation lines joined.
func (b readmeBlock) script() string { return strings.Join(joinContinued(b.lines), "\n") }

// readmeBlocks reads the code blocks of the repository's README.md: runs
// of lines indented by four spaces after a blank line.
func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	f, err := os.Open(filepath.Join(filepath.Dir(file), "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		blocks  []readmeBlock
		cur     *readmeBlock
		section string
		prevBl  = true
		n       int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "    ") && (cur != nil || prevBl):
			if cur == nil {
				blocks = append(blocks, readmeBlock{section: section, line: n})
				cur = &blocks[len(blocks)-1]
			}
			cur.lines = append(cur.lines, line[4:])
		case strings.TrimSpace(line) == "":
		default:
			cur = nil
			if h, ok := strings.CutPrefix(line, "## "); ok {
				section = h
			}
		}
		prevBl = strings.TrimSpace(line) == ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(blocks) < 5 {
		t.Fatalf("README.md: %d code blocks found; the tour has more", len(blocks))
	}
	return blocks
}

// joinContinued joins lines that end with a backslash to the next.
func joinContinued(lines []string) []string {
	var out []string
	var acc strings.Builder
	for _, l := range lines {
		if s, ok := strings.CutSuffix(strings.TrimRight(l, " "), `\`); ok {
			acc.WriteString(s)
			acc.WriteByte(' ')
			continue
		}
		acc.WriteString(l)
		out = append(out, acc.String())
		acc.Reset()
	}
	if acc.Len() > 0 {
		out = append(out, acc.String())
	}
	return out
}

// invocations returns every asyrevel command line in a shell line: the
// words after "asyrevel" or "bin/asyrevel" up to a shell separator, with
// comments dropped.
func invocations(line string) [][]string {
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	if strings.HasPrefix(strings.TrimSpace(line), "#") {
		return nil
	}
	var out [][]string
	var cur []string
	in := false
	for _, w := range shellWords(line) {
		switch w {
		case ";", "&", "&&", "||", "|", "do", "done", ")", "$(":
			if in {
				out = append(out, cur)
			}
			in, cur = false, nil
			continue
		}
		if !in && (w == "asyrevel" || w == "bin/asyrevel") {
			in = true
			continue
		}
		if in {
			cur = append(cur, w)
		}
	}
	if in {
		out = append(out, cur)
	}
	return out
}

// shellWords splits a line into words and the separators ; & && || | $( ),
// keeping quoted strings as one word (without their quotes).
func shellWords(line string) []string {
	var out []string
	var w strings.Builder
	flush := func() {
		if w.Len() > 0 {
			out = append(out, w.String())
			w.Reset()
		}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '"' || c == '\'':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				j = len(line) - i - 1
			}
			w.WriteString(line[i+1 : i+1+j])
			i += j + 1
		case c == ' ' || c == '\t':
			flush()
		case c == ';' || c == ')':
			flush()
			out = append(out, string(c))
		case c == '$' && i+1 < len(line) && line[i+1] == '(':
			flush()
			out = append(out, "$(")
			i++
		case c == '&' || c == '|':
			flush()
			if i+1 < len(line) && line[i+1] == c {
				out = append(out, string(c)+string(c))
				i++
			} else {
				out = append(out, string(c))
			}
		default:
			w.WriteByte(c)
		}
	}
	flush()
	return out
}

var (
	flagWordRe = regexp.MustCompile(`^[\[(]*--?([a-z][a-z0-9-]*)`)
	makeRe     = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
)

// readmeFlags returns the flags that "asyrevel args... -h" lists.
func readmeFlags(t *testing.T, cache map[string][]string, args ...string) ([]string, error) {
	key := strings.Join(args, " ")
	if fl, ok := cache[key]; ok {
		return fl, nil
	}
	code, out, errOut := runCLI(t, append(slices.Clone(args), "-h")...)
	if code != 0 {
		return nil, fmt.Errorf("asyrevel %s -h: exit %d: %s", key, code, firstLine(strings.TrimSpace(errOut)))
	}
	var fl []string
	for name := range helpFlags(out + errOut) {
		fl = append(fl, name)
	}
	cache[key] = fl
	return fl, nil
}

// isWord says whether w is a subcommand's name (or names, a|b): not a
// flag, not a placeholder (NAME), not an ellipsis.
func isWord(w string) bool {
	return w != "" && w[0] >= 'a' && w[0] <= 'z'
}

// checkInvocation says what is wrong with an asyrevel command line of the
// README: a command or subcommand that does not exist, a flag the command
// does not take. Alternatives written a|b|c must each exist; a flag must
// be known to at least one of them. Upper-case words are placeholders.
func checkInvocation(t *testing.T, cache map[string][]string, words []string) error {
	if len(words) == 0 {
		return fmt.Errorf("asyrevel without a command")
	}
	var problems []string
	var known []string
	for _, name := range strings.Split(words[0], "|") {
		i := slices.IndexFunc(commands, func(c command) bool { return c.name == name })
		if i < 0 {
			problems = append(problems, fmt.Sprintf("unknown command %q", name))
			continue
		}
		calls := [][]string{{name}}
		// experiment is handed over to asyrevel-lab, whose experiments
		// are its subcommands.
		hasSubs := len(commands[i].subs) > 0 || name == "experiment"
		if w := words[1:]; hasSubs && len(w) > 0 {
			switch {
			case isWord(w[0]):
				calls = nil
				for _, sub := range strings.Split(w[0], "|") {
					calls = append(calls, []string{name, sub})
				}
			case w[0] != "" && w[0][0] >= 'A' && w[0][0] <= 'Z':
				// A placeholder (NAME): the flags of any subcommand.
				for _, sub := range commands[i].subs {
					calls = append(calls, []string{name, sub})
				}
			}
		}
		for _, args := range calls {
			fl, err := readmeFlags(t, cache, args...)
			if err != nil {
				problems = append(problems, err.Error())
			}
			known = append(known, fl...)
		}
	}
	for _, w := range words[1:] {
		m := flagWordRe.FindStringSubmatch(w)
		if m == nil || m[1] == "h" {
			continue
		}
		if !slices.Contains(known, m[1]) {
			problems = append(problems, fmt.Sprintf("flag --%s: not a flag of asyrevel %s", m[1], words[0]))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

// TestReadmeCommandsExist checks every command line of README.md's code
// blocks, the command table included: each asyrevel command, subcommand and
// flag exists, and each make target is in the Makefile. A renamed flag or
// command fails it until the README follows.
func TestReadmeCommandsExist(t *testing.T) {
	t.Parallel()
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := makeRe.FindAllStringSubmatch(string(mk), -1)
	cache := map[string][]string{}
	checked := 0
	for _, b := range readmeBlocks(t) {
		for i, line := range joinContinued(b.lines) {
			where := fmt.Sprintf("README.md:%d (%s)", b.line+i, b.section)
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "make "); ok {
				target := strings.Fields(rest)[0]
				if !slices.ContainsFunc(targets, func(m []string) bool { return m[1] == target }) {
					t.Errorf("%s: make %s: no such target in the Makefile", where, target)
				}
				checked++
				continue
			}
			for _, words := range invocations(line) {
				checked++
				if err := checkInvocation(t, cache, words); err != nil {
					t.Errorf("%s: asyrevel %s: %v", where, strings.Join(words, " "), err)
				}
			}
		}
	}
	if checked < 30 {
		t.Errorf("only %d command lines checked in README.md", checked)
	}
}

func TestCheckInvocationCatchesRot(t *testing.T) {
	t.Parallel()
	cache := map[string][]string{}
	for _, tc := range []struct {
		line string
		bad  bool
	}{
		{"bin/asyrevel train --data synthetic --parties 4 --epochs 1", false},
		{"bin/asyrevel train --data synthetic --partys 4", true},
		{"bin/asyrevel trian --data synthetic", true},
		{"bin/asyrevel data splt --parties 4 x", true},
		{"bin/asyrevel data split --parties 4 --out s x", false},
		{"asyrevel aggregator|party ... --key FILE --roster FILE", false},
		{"asyrevel train|aggregator|party|broker --config RUN.yaml [--id M]", false},
		{"for m in 1 2; do bin/asyrevel party --nats u --run r --id $m --bogus & done", true},
	} {
		inv := invocations(tc.line)
		if len(inv) != 1 {
			t.Fatalf("%q: %d invocations", tc.line, len(inv))
		}
		err := checkInvocation(t, cache, inv[0])
		if (err != nil) != tc.bad {
			t.Errorf("%q: error %v, want bad=%v", tc.line, err, tc.bad)
		}
	}
}

// TestReadmeTour runs the tour's code blocks of README.md for real, one
// shell script a block in one folder, in order, with short lengths: every
// --epochs becomes 1 and every --duration 2s, the broker's port a free
// one, make build the binary built here. The a9a and MNIST blocks need
// the shared data beside the repository (data fetch finds the files there
// and checks them); mydata.csv is a small CSV written here.
func TestReadmeTour(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	bin := testBinary(t)
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	must(t, os.Symlink(bin, filepath.Join(dir, "bin", "asyrevel")))
	writeTourCSV(t, filepath.Join(dir, "mydata.csv"))
	writeJourneyFiles(t, dir) // the organisations' files of the journey's block
	_, file, _, _ := runtime.Caller(0)
	shared := filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "data")
	haveData := map[string]bool{}
	for _, set := range []string{"a9a", "mnist"} {
		if _, err := os.Stat(filepath.Join(shared, set)); err == nil {
			must(t, os.MkdirAll(filepath.Join(dir, "data"), 0o755))
			abs, _ := filepath.Abs(filepath.Join(shared, set))
			if set == "mnist" {
				// The MNIST blocks train, they do not fetch: their files
				// are the set's first tenth, in its own format. All
				// 60,000 rows cost a block minutes of codebook fitting
				// before its 2 s of training (3 min at load 20, more
				// than the rest of the tour), and the tour checks that
				// the commands run as written, not what they reach.
				writeIDXHead(t, abs, filepath.Join(dir, "data", set), 6000, 1000)
			} else {
				must(t, os.Symlink(abs, filepath.Join(dir, "data", set)))
			}
			haveData[set] = true
		}
	}
	port := freePort(t)
	rewrites := []struct {
		re  *regexp.Regexp
		new string
	}{
		{regexp.MustCompile(`--epochs [0-9.]+`), "--epochs 1"},
		{regexp.MustCompile(`--duration [0-9a-z.]+`), "--duration 2s"},
		{regexp.MustCompile(`\b4222\b`), strconv.Itoa(port)},
		{regexp.MustCompile(`\b8080\b`), strconv.Itoa(freePort(t))},
		{regexp.MustCompile(`(?m)^make build$`), ": make build"},
	}
	ran := 0
	for _, b := range readmeBlocks(t) {
		if b.section != "A tour" {
			continue
		}
		script := b.script()
		skip := ""
		for _, set := range []string{"a9a", "mnist"} {
			if strings.Contains(script, "data/"+set) && !haveData[set] {
				skip = set
			}
		}
		if skip != "" {
			t.Logf("README.md:%d: skipped: no %s in %s", b.line, skip, shared)
			continue
		}
		for _, r := range rewrites {
			script = r.re.ReplaceAllString(script, r.new)
		}
		// Background jobs (the broker) end with the block.
		script = "set -e -o pipefail\n" + script + "\nkill $(jobs -p) 2>/dev/null || true; wait\n"
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		start := time.Now()
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("README.md:%d: the block failed after %v: %v\n--- script\n%s\n--- output\n%s", b.line, time.Since(start).Round(time.Millisecond), err, script, out)
		}
		t.Logf("README.md:%d: ok in %v", b.line, time.Since(start).Round(time.Millisecond))
		if strings.Contains(script, "audit verify") && !strings.Contains(string(out), "verdict: intact") {
			t.Errorf("README.md:%d: audit verify did not find the log intact:\n%s", b.line, out)
		}
		ran++
	}
	if ran < 3 {
		t.Fatalf("only %d blocks of the tour ran", ran)
	}
	want := []string{"out/tour/summary.json", "out/tour-replay/summary.json", "out/mine/summary.json", "out/churn/summary.json", "heldout.csv", "new.csv"}
	if haveData["a9a"] {
		want = append(want, "out/a9a/summary.json", "out/demo/summary.json")
	}
	if haveData["mnist"] {
		want = append(want, "out/mnist/summary.json")
	}
	for _, f := range want {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the tour did not write %s: %v", f, err)
		}
	}
}

// writeIDXHead writes into dir the first train rows of the IDX folder
// from's training files and the first test rows of its t10k files, gzipped
// IDX files of the same names (the first dimension of each is the rows).
func writeIDXHead(t *testing.T, from, dir string, train, test int) {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
	for _, f := range []struct {
		name string
		rows int
	}{
		{dataset.IDXTrainImages, train}, {dataset.IDXTrainLabels, train},
		{dataset.IDXTestImages, test}, {dataset.IDXTestLabels, test},
	} {
		in, err := os.Open(filepath.Join(from, f.name+".gz"))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(in)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(zr)
		var magic [4]byte
		if _, err := io.ReadFull(br, magic[:]); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		dims := make([]uint32, magic[3])
		if err := binary.Read(br, binary.BigEndian, dims); err != nil || len(dims) == 0 || int(dims[0]) < f.rows || magic[2] != 0x08 {
			t.Fatalf("%s: not an IDX file of unsigned bytes with %d rows: %v %v", f.name, f.rows, magic, dims)
		}
		size := f.rows
		for _, d := range dims[1:] {
			size *= int(d)
		}
		dims[0] = uint32(f.rows)
		out, err := os.Create(filepath.Join(dir, f.name+".gz"))
		if err != nil {
			t.Fatal(err)
		}
		zw, _ := gzip.NewWriterLevel(out, gzip.BestSpeed)
		zw.Write(magic[:])
		binary.Write(zw, binary.BigEndian, dims)
		if _, err := io.CopyN(zw, br, int64(size)); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		must(t, zw.Close())
		must(t, out.Close())
		in.Close()
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := freeport.Pick("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	return p[0]
}

// writeTourCSV writes the tour's mydata.csv: 300 rows, a label column and
// six features on scales from 1 to 1,000, the label a noisy linear rule.
func writeTourCSV(t *testing.T, path string) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	b.WriteString("f1,f2,f3,f4,f5,f6,label\n")
	scales := []float64{1, 10, 100, 1000, 1, 50}
	for range 300 {
		s := 0.0
		for j, sc := range scales {
			x := r.NormFloat64()
			s += x * float64(j%3-1)
			fmt.Fprintf(&b, "%.4f,", 5*sc+x*sc)
		}
		label := 0
		if s+0.3*r.NormFloat64() > 0 {
			label = 1
		}
		fmt.Fprintf(&b, "%d\n", label)
	}
	must(t, os.WriteFile(path, []byte(b.String()), 0o644))
}
