//go:build !unix

package run

import "errors"

// freeBytes is not known here: the store is unbounded by default.
func freeBytes(string) (int64, error) { return 0, errors.New("free disk space unknown") }
