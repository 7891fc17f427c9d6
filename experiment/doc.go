// Package experiment holds the reference loops (single-process AsyREVEL,
// first-order and centralised solvers) and the experiments that compare
// them with runs of package run: throughput of the transports, time to
// accuracy, the networks, and the paper's tables and figures (fig3.go,
// table3.go, table4.go, fig4.go with the virtual-time simulation of
// simulate.go). Each writes CSV and PNG files into a results folder and
// the paper experiments their section of its REPORT.md (report.go,
// sections.go).
package experiment
