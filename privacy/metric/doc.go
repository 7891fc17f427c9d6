// Package metric scores attacks against ground truth: ROC AUC, accuracy,
// R squared and correlation. It allocates only what the sort of AUC needs.
package metric
