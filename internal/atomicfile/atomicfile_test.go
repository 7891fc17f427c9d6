package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var errBoom = errors.New("boom")

// half writes the first half of s, then fails.
func half(s string) func(io.Writer) error {
	return func(w io.Writer) error {
		if _, err := io.WriteString(w, s[:len(s)/2]); err != nil {
			return err
		}
		return errBoom
	}
}

func whole(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

// TestWrite: the file is whole (the new content) or as it was (the old
// content, or absent) after each write, and no temporary file is left in
// its folder.
func TestWrite(t *testing.T) {
	errAny := errors.New("any error")
	cases := []struct {
		name    string
		old     string // "": no file before
		dir     bool   // the path is a folder: the rename fails
		new     bool   // WriteNew
		write   func(io.Writer) error
		wantErr error // nil: none; errAny: any
		want    string
	}{
		{name: "new file", write: whole("second"), want: "second"},
		{name: "replaced", old: "first", write: whole("second"), want: "second"},
		{name: "failed write keeps the old file", old: "first", write: half("second, cut"), wantErr: errBoom, want: "first"},
		{name: "failed write leaves no file", write: half("second, cut"), wantErr: errBoom},
		{name: "failed rename", dir: true, write: whole("second"), wantErr: errAny},
		{name: "WriteNew makes a file", new: true, write: whole("second"), want: "second"},
		{name: "WriteNew never replaces", new: true, old: "first", write: whole("second"), wantErr: fs.ErrExist, want: "first"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "x.json")
			if c.old != "" {
				if err := os.WriteFile(path, []byte(c.old), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if c.dir {
				if err := os.MkdirAll(filepath.Join(path, "inside"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			write := Write
			if c.new {
				write = WriteNew
			}
			err := write(path, 0o644, c.write)
			switch {
			case c.wantErr == nil && err != nil, c.wantErr != nil && err == nil,
				c.wantErr != nil && c.wantErr != errAny && !errors.Is(err, c.wantErr):
				t.Fatalf("write: %v, want %v", err, c.wantErr)
			}
			if !c.dir {
				b, rerr := os.ReadFile(path)
				switch {
				case c.want == "" && !errors.Is(rerr, fs.ErrNotExist):
					t.Errorf("after the write: %q, %v; want no file", b, rerr)
				case c.want != "" && (rerr != nil || string(b) != c.want):
					t.Errorf("after the write: %q, %v; want %q", b, rerr, c.want)
				}
			}
			entries, _ := os.ReadDir(dir)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if there := c.want != "" || c.dir; there && (len(names) != 1 || names[0] != "x.json") || !there && len(names) != 0 {
				t.Errorf("the folder holds %q", names)
			}
		})
	}
}

// TestSweepsLeftovers: a temporary file a killed writer left behind
// (older than staleAfter) is removed by the next write of the same file;
// one being written now, another file's, and a user's own files stay.
// Before, every kill during a checkpoint's save left one more for good.
func TestSweepsLeftovers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.ckpt")
	old := time.Now().Add(-2 * staleAfter)
	mk := func(name string, mtime time.Time) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := mk(".state.ckpt.tmp123", old)
	fresh := mk(".state.ckpt.tmp456", time.Now())
	other := mk(".other.ckpt.tmp789", old)
	mine := mk(".state.ckpt.tmpnotes", old)
	if err := WriteBytes(path, 0o644, []byte("whole")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a leftover of a killed writer is still there (%v)", err)
	}
	for _, p := range []string{fresh, other, mine, path} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v, want it kept", filepath.Base(p), err)
		}
	}
}
