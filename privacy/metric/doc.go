// Package metric scores attacks against ground truth: ROC AUC and its
// Hanley-McNeil 95% interval, accuracy, R squared and correlation. It
// allocates only what the sort of AUC needs.
package metric
