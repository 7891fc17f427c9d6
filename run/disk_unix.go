//go:build unix

package run

import (
	"os"
	"syscall"
)

// freeBytes is the disk space free for an unprivileged user at dir (or
// the nearest existing folder above it).
func freeBytes(dir string) (int64, error) {
	for {
		var st syscall.Statfs_t
		err := syscall.Statfs(dir, &st)
		if err == nil {
			return int64(st.Bavail) * int64(st.Bsize), nil
		}
		if !os.IsNotExist(err) {
			return 0, err
		}
		parent := dirOf(dir)
		if parent == dir {
			return 0, err
		}
		dir = parent
	}
}
