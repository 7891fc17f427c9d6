//go:build !unix

package broker

import "os"

// Without flock the store is not locked: the checks of package replay
// that look for processes holding the store's files still apply.
func flock(*os.File, bool) error { return nil }

func funlock(*os.File) {}
