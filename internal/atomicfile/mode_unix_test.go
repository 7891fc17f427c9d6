//go:build unix

package atomicfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestMode: the file has the mode asked for (less the umask), whatever the
// mode of the file it replaces: a key written 0600 over a file of 0644
// stays private.
func TestMode(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for _, c := range []struct {
		perm, before, want os.FileMode
	}{
		{0o600, 0, 0o600},
		{0o600, 0o644, 0o600},
		{0o644, 0o600, 0o644},
		{0o666, 0, 0o644}, // as os.Create: the umask applies
	} {
		path := filepath.Join(t.TempDir(), "key")
		if c.before != 0 {
			if err := os.WriteFile(path, []byte("old"), c.before); err != nil {
				t.Fatal(err)
			}
		}
		if err := WriteBytes(path, c.perm, []byte("secret")); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != c.want {
			t.Errorf("perm %o over %o: mode %o, want %o", c.perm, c.before, got, c.want)
		}
	}
}
