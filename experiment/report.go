package experiment

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/asyrevel/asyrevel/run"
)

// ReportFile is the name of the report the paper experiments write their
// sections into.
const ReportFile = "REPORT.md"

// Section is one experiment's part of REPORT.md.
type Section struct {
	Name     string // fig3, table3, table4, fig4
	Title    string
	Command  string // the command that reproduces it
	Machine  string // see Machine
	Started  time.Time
	Duration time.Duration
	Settings []string // one line each
	Body     string   // markdown: results, plots, the paper's figures beside ours
}

// sectionOrder is the order of the sections in the report (the paper's).
var sectionOrder = []string{"fig3", "table3", "table4", "fig4"}

const reportHead = `# asyrevel: the paper's experiments

The four comparisons of Zhang, Gu, Dang, Deng and Huang, "Desirable Companion for Vertical
Federated Learning: New Zeroth-Order Gradient Based Algorithm" (CIKM 2021), measured with this
repository's pipeline: parties and aggregator exchanging messages over an embedded NATS JetStream
broker (TCP loopback), the same code as ` + "`asyrevel train`" + `. Each section gives the command that
regenerates it (its CSV and PNG are in this folder), the machine, the settings and how long it
took. ` + "`asyrevel experiment all`" + ` runs the four and rebuilds this file; ` + "`--quick`" + ` runs a short
version of each.

Algorithms (` + "`--algo`" + `): AsyREVEL-Gau and -Uni (asynchronous, zeroth-order: only outputs and
losses travel), SynREVEL-Gau and -Uni (the same estimator in synchronous rounds over one batch
shared by all parties), TIG (first-order split learning: the aggregator replies dF_0/dc and the
parties back-propagate; needs white-box models), NonF (all features at one party, q = 1).
`

// WriteSection puts s into dir/REPORT.md, replacing an earlier version of
// the same section and keeping the others, in the paper's order.
func WriteSection(dir string, s Section) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, ReportFile)
	sections := map[string]string{}
	if old, err := os.ReadFile(path); err == nil {
		sections = parseSections(string(old))
	}
	sections[s.Name] = s.markdown()
	var b strings.Builder
	b.WriteString(reportHead)
	names := append([]string(nil), sectionOrder...)
	for n := range sections {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, n := range names {
		if body, ok := sections[n]; ok {
			fmt.Fprintf(&b, "\n<!-- section %s -->\n%s<!-- end %s -->\n", n, body, n)
		}
	}
	return run.WriteAtomic(path, []byte(b.String()))
}

// parseSections reads the sections of a report written by WriteSection.
func parseSections(text string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var name string
	var body strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "<!-- section "); ok && strings.HasSuffix(n, " -->") {
			name = strings.TrimSuffix(n, " -->")
			body.Reset()
			continue
		}
		if name != "" && line == "<!-- end "+name+" -->" {
			out[name] = body.String()
			name = ""
			continue
		}
		if name != "" {
			body.WriteString(line)
			body.WriteByte('\n')
		}
	}
	return out
}

func (s Section) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n", s.Title)
	fmt.Fprintf(&b, "    %s\n\n", s.Command)
	fmt.Fprintf(&b, "Run %s, %s, on %s.\n\n", s.Started.UTC().Format("2006-01-02 15:04 UTC"), fmtDuration(s.Duration), s.Machine)
	if len(s.Settings) > 0 {
		b.WriteString("Settings:\n")
		for _, l := range s.Settings {
			fmt.Fprintf(&b, "- %s\n", l)
		}
		b.WriteString("\n")
	}
	b.WriteString(strings.TrimRight(s.Body, "\n"))
	b.WriteString("\n")
	return b.String()
}

// fmtDuration writes d as "3 min 12 s" or "45 s".
func fmtDuration(d time.Duration) string {
	d = d.Round(time.Second)
	if d < time.Minute {
		return fmt.Sprintf("%d s", int(d.Seconds()))
	}
	if d < time.Hour {
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
}

// Machine describes this machine: processor, cores, memory, OS, Go, and
// the load average (other jobs share it).
func Machine() string {
	cpu := "unknown processor"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.0f GB", float64(kb)/(1<<20))
		}
	}
	load := ""
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			load = fmt.Sprintf(", load average %s at the start", f[0])
		}
	}
	return fmt.Sprintf("%s, %d cores%s, %s/%s, %s%s", cpu, runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH, runtime.Version(), load)
}

// mdTable renders a markdown table.
func mdTable(header []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
	for range header {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// pct formats a fraction as a percentage with two decimals ("-" for NaN).
func pct(v float64) string {
	if v != v {
		return "-"
	}
	return fmtF(100*v, 2) + "%"
}

// SectionCommand returns the command line(s) of section name in
// dir/REPORT.md ("" if there is none).
func SectionCommand(dir, name string) string {
	old, err := os.ReadFile(filepath.Join(dir, ReportFile))
	if err != nil {
		return ""
	}
	body := parseSections(string(old))[name]
	var cmds []string
	started := false
	for _, line := range strings.Split(body, "\n") {
		c, ok := strings.CutPrefix(line, "    ")
		switch {
		case ok:
			cmds, started = append(cmds, c), true
		case started:
			return strings.Join(cmds, "\n    ")
		}
	}
	return strings.Join(cmds, "\n    ")
}

// SectionSettings is the settings list of section name in dir's report
// (nil if none), without the lines a rebuild added.
func SectionSettings(dir, name string) []string {
	old, err := os.ReadFile(filepath.Join(dir, ReportFile))
	if err != nil {
		return nil
	}
	var out []string
	in := false
	for _, line := range strings.Split(parseSections(string(old))[name], "\n") {
		switch {
		case line == "Settings:":
			in = true
		case in && strings.HasPrefix(line, "- "):
			if s := strings.TrimPrefix(line, "- "); !strings.HasPrefix(s, "rebuilt by ") {
				out = append(out, s)
			}
		case in && line != "":
			return out
		}
	}
	return out
}
