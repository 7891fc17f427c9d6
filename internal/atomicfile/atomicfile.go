package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Write writes path through write: into a new temporary file in path's
// folder, created with mode perm less the umask (as os.WriteFile creates
// a file), which is synced, closed and renamed over path; the folder is
// synced then, so that the rename outlives a crash. On any failure (write's
// error, returned as it is, or the file system's) the temporary file is
// removed and path is left as it was. The folder must exist.
func Write(path string, perm fs.FileMode, write func(io.Writer) error) error {
	return writeFile(path, perm, write, os.Rename)
}

// WriteBytes is Write of data.
func WriteBytes(path string, perm fs.FileMode, data []byte) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteNew is Write that never replaces a file: the new one is put in place
// with a hard link, which fails with an error wrapping fs.ErrExist if path
// exists by then. On a file system without hard links it is renamed
// instead, which replaces a file made there since the caller looked.
func WriteNew(path string, perm fs.FileMode, write func(io.Writer) error) error {
	return writeFile(path, perm, write, link)
}

func link(tmp, path string) error {
	err := os.Link(tmp, path)
	switch {
	case err == nil:
		os.Remove(tmp)
		return nil
	case errors.Is(err, fs.ErrExist):
		return err
	}
	return os.Rename(tmp, path)
}

func writeFile(path string, perm fs.FileMode, write func(io.Writer) error, put func(tmp, path string) error) (err error) {
	dir := filepath.Dir(path)
	f, err := create(dir, filepath.Base(path), perm)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = put(f.Name(), path)
	}
	if err != nil {
		return err
	}
	// Not every file system syncs a folder (nor every system opens one);
	// the file itself is synced.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	sweep(dir, filepath.Base(path))
	return nil
}

// staleAfter is the age past which a temporary file of a target is a
// leftover of a writer that died (kill -9 during a write): a write takes
// milliseconds to seconds.
const staleAfter = time.Hour

// sweep removes the leftover temporary files of base in dir. Checkpoints
// are written every few seconds under a fresh temporary name each time:
// each kill during a save would otherwise leave one more behind for good.
func sweep(dir, base string) {
	prefix := "." + base + ".tmp"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), prefix) || e.IsDir() {
			continue
		}
		if _, err := strconv.ParseUint(e.Name()[len(prefix):], 10, 32); err != nil {
			continue // not a name of create's making
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleAfter {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// create makes a new file .base.tmpN in dir with mode perm (less the
// umask), N random.
func create(dir, base string, perm fs.FileMode) (*os.File, error) {
	for range 100 {
		name := filepath.Join(dir, "."+base+".tmp"+strconv.FormatUint(uint64(rand.Uint32()), 10))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, &fs.PathError{Op: "createtemp", Path: filepath.Join(dir, "."+base+".tmp*"), Err: fs.ErrExist}
}
