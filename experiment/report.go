package experiment

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/asyrevel/asyrevel/experiment/report"
)

// ReportFile is the name of the report in a results folder.
const ReportFile = report.ReportFile

// DefaultOut is where the experiments write when not told otherwise: a
// folder of the working tree that git ignores, so that a run from a clone
// leaves the committed results/ alone (--out results updates those).
const DefaultOut = "out/experiments"

// Section is how an experiment's run is recorded in its results folder:
// the command, when and where it ran, and the settings its CSV files do
// not hold (runs.csv, package report). The report's text is generated from
// the CSV files alone.
type Section struct {
	Name     string // the report's section: fig3, table3, table4, fig4, validate, faults, align, wan, serve, ...
	Title    string // unused: the report names its sections
	Command  string // the command line, or several, one a line
	Machine  string // see Machine; this machine's if empty
	Load     string // the load average at the start; the process's start's if empty
	Started  time.Time
	Duration time.Duration
	Settings []string // one line each
	// Body is not used: the report's text comes from the CSV files.
	Body string
}

// The process's start: when an experiment that does not say otherwise
// started, and the load then.
var (
	processStart = time.Now()
	processLoad  = LoadAverage()
)

// WriteSection records s in dir's runs.csv (in place of the section's
// earlier run) and writes dir's report again from its CSV files.
func WriteSection(dir string, s Section) error {
	if s.Command == "" {
		s.Command = Invocation()
	}
	if s.Started.IsZero() {
		s.Started = processStart
	}
	if s.Duration == 0 {
		s.Duration = time.Since(s.Started)
	}
	if s.Machine == "" {
		s.Machine = Machine()
	}
	if s.Load == "" {
		s.Load = processLoad
	}
	r := report.Run{Experiment: s.Name, Started: s.Started, Seconds: s.Duration.Seconds(), Machine: s.Machine, Load: s.Load, Settings: s.Settings}
	for _, c := range strings.Split(s.Command, "\n") {
		if c = strings.TrimSpace(c); c != "" {
			r.Commands = append(r.Commands, c)
		}
	}
	if err := report.Record(dir, r); err != nil {
		return err
	}
	return writeReport(dir)
}

// writeReport writes dir's report again from its CSV files. A CSV file of
// the folder that the report cannot read (another experiment's, of an
// older version) is said in the report and on stderr, and is no error of
// the experiment that just wrote its own.
func writeReport(dir string) error {
	_, err := report.Write(report.Options{Results: dir})
	if errors.Is(err, report.ErrUnreadable) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", filepath.Join(dir, ReportFile), err)
		return nil
	}
	return err
}

// record records the run of an experiment that writes no section of its
// own (its command is this process's) and writes the report again.
func record(dir, name string, settings ...string) error {
	return WriteSection(dir, Section{Name: name, Settings: settings})
}

// Invocation is this process's command line as a user types it:
// "asyrevel" and its arguments ("" when the program is not asyrevel, as
// in a test).
func Invocation() string {
	if len(os.Args) == 0 || !strings.HasPrefix(filepath.Base(os.Args[0]), "asyrevel") {
		return ""
	}
	return strings.Join(append([]string{"asyrevel"}, os.Args[1:]...), " ")
}

// Machine describes this machine: processor, cores, memory, OS and Go.
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
	return fmt.Sprintf("%s, %d cores%s, %s/%s, %s", cpu, runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// LoadAverage is the machine's load average over the last minute as
// /proc/loadavg gives it ("" if unknown).
func LoadAverage() string {
	if v := loadAverage(); !math.IsNaN(v) {
		return fmt.Sprintf("%.2f", v)
	}
	return ""
}

// sectionRun is the recorded run of section name in dir (zero if none).
func sectionRun(dir, name string) report.Run {
	runs, err := report.ReadRuns(dir)
	if err != nil {
		return report.Run{}
	}
	return runs[name]
}
