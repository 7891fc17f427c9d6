// Package report writes the experiments' report, REPORT.md (and
// REPORT-privacy.md and the plots beside it), from the CSV files of a
// results folder and nothing else: every figure, comparison and verdict in
// it is computed from the rows, and the text around them says how they
// were measured without stating a figure of its own.
//
// The experiments (package experiment) write the CSV files and, in
// runs.csv, the command, time and machine of each run (Record); Generate
// reads them back. The package imports no runtime package (run, broker,
// aggregator, party): only the CSV files tie it to the experiments, so a
// report can be written, checked and reviewed without running anything.
//
// `asyrevel experiment report` runs Write on results/; a test fails when
// the committed results/REPORT.md differs from what it writes.
package report
