// Package experiment holds the experiments' drivers: each experiment's
// runs (of package run, or of the asyrevel binary as processes) and the
// CSV files it writes: throughput of the transports, time to accuracy,
// scale, the networks, faults, soak, serving, alignment, privacy, and the
// paper's tables and figures (fig3.go, table3.go, table4.go, fig4.go and
// its costs, validate.go against real processes).
//
// It is one of three rooms. The simulator and the reference solvers it
// compares with (single-process AsyREVEL, first-order training, the
// centralised L-BFGS solver) are package experiment/sim; the report,
// written from the CSV files alone, is package experiment/report. Every
// experiment writes into a results folder (DefaultOut unless told
// otherwise), records its command, time and machine in the folder's
// runs.csv (WriteSection) and writes the folder's REPORT.md again.
package experiment
