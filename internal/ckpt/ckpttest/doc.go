// Package ckpttest holds the checks of checkpoint files that the
// aggregator's and the parties' tests share: a file of the build before
// the envelope (package ckpt) still decodes, the current encoding reads
// back, and a damaged file is refused with an error that says why.
package ckpttest
