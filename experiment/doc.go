// Package experiment holds the reference loops (single-process AsyREVEL,
// first-order and centralised solvers) and the experiments that compare
// them with runs of package run: throughput of the transports, time to
// accuracy, the networks, and the paper's tables and figures. Each writes
// CSV and PNG files into a results folder.
package experiment
