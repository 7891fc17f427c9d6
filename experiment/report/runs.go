package report

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/asyrevel/asyrevel/internal/atomicfile"
)

// RunsFile is the CSV file of a results folder that says where each of its
// other files comes from: one row per experiment, the last run's.
const RunsFile = "runs.csv"

// runsHeader are RunsFile's columns.
var runsHeader = []string{"experiment", "command", "started_utc", "seconds", "machine", "load_average", "settings"}

// Run is what the report says of how an experiment's CSV files were made:
// the command, when, for how long, on what machine under what load, and
// the settings the command chose that its CSV files do not hold. None of
// it is a result.
type Run struct {
	// Experiment names the run's section: fig3, table3, table4, fig4,
	// validate, faults, align, wan, serve, nn, tta, scale, soak,
	// adversary, privacy, or a throughput CSV's name without .csv
	// (throughput, throughput-quick, ...).
	Experiment string
	Commands   []string // the command lines, in order (table4 keeps those of the sets it kept)
	Started    time.Time
	Seconds    float64 // how long it took (0: not known)
	Machine    string  // processor, cores, memory, OS, Go
	Load       string  // the load average when it started ("" if not known)
	Settings   []string
}

// ReadRuns reads dir's runs.csv (none: an empty map and no error).
func ReadRuns(dir string) (map[string]Run, error) {
	t, err := readTable(dir, RunsFile, runsHeader[:2]...)
	if err != nil || t == nil {
		return map[string]Run{}, err
	}
	out := map[string]Run{}
	for i := range t.rows {
		r := Run{Experiment: t.str(i, "experiment"), Machine: t.str(i, "machine"), Load: t.str(i, "load_average"),
			Commands: lines(t.rows[i][t.col["command"]]), Settings: lines(t.str(i, "settings"))}
		if s := t.str(i, "started_utc"); s != "" {
			if r.Started, err = time.Parse(time.RFC3339, s); err != nil {
				return nil, fmt.Errorf("%w: %s row %d: started_utc %q: %w", ErrUnreadable, RunsFile, i+2, s, err)
			}
		}
		r.Seconds = t.num(i, "seconds")
		out[r.Experiment] = r
	}
	return out, nil
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// Record puts r into dir's runs.csv, in place of the row of the same
// experiment (a new one goes at the end).
func Record(dir string, r Run) error {
	if r.Experiment == "" {
		return fmt.Errorf("report: a run without an experiment name")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rec := []string{r.Experiment, strings.Join(r.Commands, "\n"), "", "", r.Machine, r.Load, strings.Join(r.Settings, "\n")}
	if !r.Started.IsZero() {
		rec[2] = r.Started.UTC().Format(time.RFC3339)
	}
	if r.Seconds > 0 {
		rec[3] = strconv.FormatFloat(r.Seconds, 'f', 0, 64)
	}
	var recs [][]string
	t, err := readTable(dir, RunsFile, runsHeader...)
	if err != nil {
		return err
	}
	replaced := false
	if t != nil {
		for i := range t.rows {
			row := make([]string, len(runsHeader))
			for j, c := range runsHeader {
				row[j] = t.rows[i][t.col[c]]
			}
			if row[0] == r.Experiment {
				row, replaced = rec, true
			}
			recs = append(recs, row)
		}
	}
	if !replaced {
		recs = append(recs, rec)
	}
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write(runsHeader)
	_ = w.WriteAll(recs)
	if err := w.Error(); err != nil {
		return err
	}
	return atomicfile.WriteBytes(filepath.Join(dir, RunsFile), 0o644, b.Bytes())
}

// header is the lines under a section's title: its command, when and where
// it ran, its settings; or, without a record in runs.csv, the command that
// writes the section's files and that nothing more is known.
func (r Run) header(command string) string {
	var b strings.Builder
	if len(r.Commands) == 0 {
		fmt.Fprintf(&b, "    %s\n\n", command)
		b.WriteString("No record of this run in runs.csv: the command above is the one that writes these files; the flags, time and machine of the run are not known.\n\n")
		return b.String()
	}
	for _, c := range r.Commands {
		fmt.Fprintf(&b, "    %s\n", c)
	}
	b.WriteString("\n")
	var when []string
	if !r.Started.IsZero() {
		when = append(when, r.Started.UTC().Format("2006-01-02 15:04 UTC"))
	}
	if r.Seconds > 0 {
		when = append(when, fmtDuration(time.Duration(r.Seconds*float64(time.Second))))
	}
	if r.Machine != "" {
		when = append(when, "on "+r.Machine)
	}
	if r.Load != "" {
		when = append(when, "load average "+r.Load+" at the start")
	}
	if len(when) > 0 {
		fmt.Fprintf(&b, "Run %s.\n\n", strings.Join(when, ", "))
	}
	if len(r.Settings) > 0 {
		b.WriteString("Settings:\n")
		for _, s := range r.Settings {
			fmt.Fprintf(&b, "- %s\n", s)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// fmtDuration writes d as "3 min 12 s", "45 s" or "2 h 5 min".
func fmtDuration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
}
