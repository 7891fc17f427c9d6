package report

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/asyrevel/asyrevel/internal/atomicfile"
)

// File names of the report.
const (
	ReportFile  = "REPORT.md"
	PrivacyFile = "REPORT-privacy.md"
)

// Files are a report's files by name: REPORT.md, REPORT-privacy.md and
// the plots, all written into one folder.
type Files map[string][]byte

// Names are the files' names, sorted.
func (fs Files) Names() []string {
	var out []string
	for n := range fs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// section is one part of REPORT.md: an experiment's CSV files rendered.
type section struct {
	name  string // its row in runs.csv
	title string
	level int // 2: ##, 3: ### (inside "Measurements" unless inside)
	// inside: a level-3 section that belongs to the section before it, not
	// to "Measurements".
	inside bool
	file   string // the CSV file whose presence makes the section
	// command is the command that writes the files, said when runs.csv
	// has no row for the section.
	command string
	body    func(g *gen) (string, error)
}

// gen is one generation of a report from a results folder.
type gen struct {
	dir      string
	runs     map[string]Run
	files    Files
	problems []error
	tables   map[string]*table
}

// table reads the CSV file name of the results folder, once; nil (and no
// error) if there is none.
func (g *gen) table(name string, need ...string) (*table, error) {
	if t, ok := g.tables[name]; ok && t != nil {
		for _, c := range need {
			if !t.has(c) {
				return nil, fmt.Errorf("%w: %s has no column %s", ErrUnreadable, name, c)
			}
		}
		return t, nil
	}
	t, err := readTable(g.dir, name, need...)
	if err != nil {
		return nil, err
	}
	g.tables[name] = t
	return t, nil
}

func (g *gen) exists(name string) bool {
	_, err := os.Stat(filepath.Join(g.dir, name))
	return err == nil
}

// Generate reads the CSV files of the results folder dir and returns the
// report's files. A CSV file it cannot read leaves a note in its section
// in place of the figures, and Generate's error (ErrUnreadable) lists
// every such file after the files were generated.
func Generate(dir string) (Files, error) {
	g, err := generate(dir)
	return g.files, err
}

// generate is Generate, with what it read.
func generate(dir string) (*gen, error) {
	g := &gen{dir: dir, files: Files{}, tables: map[string]*table{}}
	runs, err := ReadRuns(dir)
	if err != nil {
		g.problems = append(g.problems, err)
		runs = map[string]Run{}
	}
	g.runs = runs
	secs := g.sections()
	var b strings.Builder
	b.WriteString(head)
	var present []section
	measured := false // a subsection of Measurements has its file
	for _, s := range secs {
		if s.file != "" && g.exists(s.file) {
			present = append(present, s)
			measured = measured || (s.level == 3 && !s.inside)
		} else if s.file == "" {
			present = append(present, s)
		}
	}
	if !measured {
		present = slices.DeleteFunc(present, func(s section) bool { return s.file == "" })
	}
	if len(present) == 0 {
		b.WriteString("\nThis folder holds no results of an experiment.\n")
	}
	for _, s := range present {
		if s.level == 2 {
			fmt.Fprintf(&b, "- [%s](#%s)\n", s.title, anchor(s.title))
		}
	}
	for _, s := range present {
		fmt.Fprintf(&b, "\n%s %s\n\n", strings.Repeat("#", s.level), s.title)
		if s.file != "" {
			b.WriteString(g.runs[s.name].header(s.command))
		}
		body, err := s.body(g)
		if err != nil {
			g.problems = append(g.problems, err)
			body = fmt.Sprintf("**Not reported**: %v.\n", err)
		}
		b.WriteString(strings.TrimRight(body, "\n") + "\n")
	}
	g.files[ReportFile] = []byte(b.String())
	if len(g.problems) > 0 {
		return g, errors.Join(g.problems...)
	}
	return g, nil
}

// Options say where Write reads and writes.
type Options struct {
	Results string // the folder of the CSV files (default "results")
	// Out is the report's file (default Results/REPORT.md); the privacy
	// report and the plots go into its folder.
	Out string
}

// Write generates the report of o.Results and writes its files. It
// returns the paths it wrote; an error wrapping ErrUnreadable comes after
// every file was written (their sections say what could not be read).
func Write(o Options) ([]string, error) {
	if o.Results == "" {
		o.Results = "results"
	}
	if o.Out == "" {
		o.Out = filepath.Join(o.Results, ReportFile)
	}
	if st, err := os.Stat(o.Results); err != nil {
		return nil, err
	} else if !st.IsDir() {
		return nil, fmt.Errorf("%s is not a folder", o.Results)
	}
	files, gerr := Generate(o.Results)
	if files == nil {
		return nil, gerr
	}
	outDir := filepath.Dir(o.Out)
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	var wrote []string
	for _, name := range files.Names() {
		path := filepath.Join(outDir, name)
		if name == ReportFile {
			path = o.Out
		}
		if err := atomicfile.WriteBytes(path, 0o644, files[name]); err != nil {
			return wrote, err
		}
		wrote = append(wrote, path)
	}
	return wrote, gerr
}

// anchor is the anchor GitHub gives a heading.
func anchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

const head = `# asyrevel: measurements

<!-- Generated by "asyrevel experiment report" from the CSV files of this folder. Do not edit:
TestCommittedReport fails when this file differs from what the command writes. -->

Every figure below is computed from the CSV files of this folder by ` + "`asyrevel experiment report`" + `,
which writes this file (and REPORT-privacy.md and the plots) and nothing else; each section gives the
command that wrote its files and, from runs.csv, when, where and with what settings it ran. To change a
figure, run its command (with ` + "`--out results`" + `: experiments write under out/experiments otherwise),
then ` + "`asyrevel experiment report`" + `. Absolute times depend on the machine and its load, given with each
run.

The pipeline is this repository's: parties and aggregator exchanging messages over an embedded NATS
JetStream broker (TCP loopback unless said), the same code as ` + "`asyrevel train`" + `. Algorithms
(` + "`--algo`" + `): AsyREVEL-Gau and -Uni (asynchronous, zeroth-order: only outputs and losses travel),
SynREVEL-Gau and -Uni (the same estimator in synchronous rounds over one batch shared by all parties),
TIG (first-order split learning: the aggregator replies dF_0/dc and the parties back-propagate),
NonF (all features at one party, q = 1). The paper is Zhang, Gu, Dang, Deng and Huang, "Desirable
Companion for Vertical Federated Learning: New Zeroth-Order Gradient Based Algorithm" (CIKM 2021).

`

// sections are the report's sections in order.
func (g *gen) sections() []section {
	secs := []section{
		{name: "fig3", title: "Figure 3: training loss against time", level: 2, file: "fig3_runs.csv", command: "asyrevel experiment fig3", body: fig3Body},
		{name: "table3", title: "Table 3: communication per round", level: 2, file: "table3.csv", command: "asyrevel experiment table3", body: table3Body},
		{name: "table4", title: "Table 4: accuracy, federated against non-federated", level: 2, file: "table4.csv", command: "asyrevel experiment table4", body: table4Body},
		{name: "fig4", title: "Figure 4: speed-up with the number of parties", level: 2, file: "fig4.csv", command: "asyrevel experiment fig4", body: fig4Body},
		{name: "validate", title: "Figure 4's simulation against real processes with limited processors", level: 2, file: "validate.csv", command: "asyrevel experiment validate", body: validateBody},
		{name: "nn", title: "The paper's network: accuracy against the paper's", level: 2, file: "nn.csv", command: "asyrevel experiment nn", body: nnBody},
		{name: "privacy-goal", title: GoalTitle, level: 2, file: "privacy-goal.csv", command: goalCommand, body: goalBody},
		{name: "privacy-ceiling", title: CeilingTitle, level: 3, inside: true, file: ceilingFile, command: ceilingCommand, body: ceilingBody},
		{name: "faults", title: "Faults: kill -9 and SIGTERM of the aggregator and a party, resumed from checkpoints", level: 2, file: "faults.csv", command: "asyrevel experiment faults", body: faultsBody},
		{name: "measurements", title: "Measurements", level: 2, body: measurementsBody},
	}
	for _, name := range g.throughputFiles() {
		stem := strings.TrimSuffix(name, ".csv")
		secs = append(secs, section{name: stem, title: "Throughput (" + "`" + name + "`)", level: 3, file: name,
			command: "asyrevel experiment throughput", body: func(g *gen) (string, error) { return throughputBody(g, name) }})
	}
	secs = append(secs,
		section{name: "tta", title: "Time to accuracy", level: 3, file: "time_to_accuracy.csv", command: "asyrevel experiment tta", body: ttaBody},
		section{name: "scale", title: "Scale: parties and samples", level: 3, file: "scale.csv", command: "asyrevel experiment scale", body: scaleBody},
		section{name: "soak", title: "Long runs: memory and the store", level: 3, file: "soak.csv", command: "asyrevel experiment soak", body: soakBody},
		section{name: "adversary", title: "Adversary: a rogue's bad messages", level: 3, file: "adversary.csv", command: "asyrevel experiment adversary", body: adversaryBody},
		section{name: "privacy", title: "Privacy: label inference against the defenses", level: 3, file: "privacy.csv", command: "asyrevel experiment privacy", body: privacySummaryBody},
		section{name: "elsewhere", title: "Measured by commands that keep no CSV", level: 3, body: elsewhereBody},
		section{name: "align", title: "Private entity alignment: ECDH set intersection against its bound", level: 2, file: "align.csv", command: "asyrevel experiment align", body: alignBody},
		section{name: "wan", title: "A real network: AsyREVEL against SynREVEL over delayed links", level: 2, file: "wan.csv", command: "asyrevel experiment wan", body: wanBody},
		section{name: "serve", title: "Serving: batch predictions, online latency, index memory", level: 2, file: "serve.csv", command: "asyrevel experiment serve", body: serveBody},
	)
	return secs
}

// throughputFiles are the throughput*.csv files of the folder, in the
// order they were run (runs.csv), else by name.
func (g *gen) throughputFiles() []string {
	m, _ := filepath.Glob(filepath.Join(g.dir, "throughput*.csv"))
	var names []string
	for _, p := range m {
		names = append(names, filepath.Base(p))
	}
	slices.SortStableFunc(names, func(a, b string) int {
		ra, rb := g.runs[strings.TrimSuffix(a, ".csv")], g.runs[strings.TrimSuffix(b, ".csv")]
		switch {
		case ra.Started.IsZero() && rb.Started.IsZero():
			return strings.Compare(a, b)
		case ra.Started.IsZero():
			return 1
		case rb.Started.IsZero():
			return -1
		}
		return ra.Started.Compare(rb.Started)
	})
	return names
}
