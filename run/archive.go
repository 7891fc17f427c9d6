package run

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/asyrevel/asyrevel/internal/atomicfile"
)

// ErrArchive reports an archive that is not one ExportRun wrote, or that
// is damaged or hostile (paths outside it, links, sizes past the limit).
var ErrArchive = errors.New("not a run archive")

// ArchiveManifest is the first entry of a run archive (manifest.json).
type ArchiveManifest struct {
	Format   int       `json:"format"`
	Run      string    `json:"run"`
	Created  time.Time `json:"created"`
	Bytes    int64     `json:"stream_bytes"`
	Files    int       `json:"files"`
	Roster   bool      `json:"roster"`
	Receipts int       `json:"receipts"`
	// SHA256 is the digest of every other entry's name and content, in
	// the archive's order: a damaged archive is refused when it is read.
	SHA256 string `json:"sha256"`
}

const archiveFormat = 1

// maxArchiveBytes bounds what reading an archive writes to disk.
const maxArchiveBytes = 1 << 40

// ExportRun writes run's stream from the store at storeDir (a single
// server's, not in use), with the run's roster (roster may be "") and the
// receipts the parties kept (every folder of receipts, each searched
// recursively for .json files), into one self-contained gzip-compressed tar
// file at out: what audit verify --archive and replay --archive read
// offline. It returns the manifest.
//
// One receipts folder keeps its layout under receipts/; with several, the
// receipts of folder i (from 1) that sit in its sub-folder S go to
// receipts/i-S/ (S is the folder's own name for the receipts at its top),
// so that folders holding the same names (party-1/ckpt-1.json kept by two
// processes) do not collide, and every receipt is one level deep, where
// audit verify looks.
func ExportRun(storeDir, run, roster string, receipts []string, out string) (*ArchiveManifest, error) {
	st, err := OpenStore(storeDir)
	if err != nil {
		return nil, err
	}
	if st.Cluster {
		return nil, fmt.Errorf("%s is an embedded cluster's store: export from a single server's store", st.Dir)
	}
	var sr *StoreRun
	for i := range st.Runs {
		if st.Runs[i].Run == run {
			sr = &st.Runs[i]
		}
	}
	if sr == nil {
		return nil, fmt.Errorf("%s holds no run %q (it holds %s)", st.Dir, run, st.runNames())
	}
	release, err := st.lock()
	if err != nil {
		return nil, err
	}
	defer release()
	var entries []archiveEntry
	for _, d := range sr.dirs {
		rel, err := filepath.Rel(st.Dir, d)
		if err != nil {
			return nil, err
		}
		err = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			r, err := filepath.Rel(d, p)
			if err != nil {
				return err
			}
			entries = append(entries, archiveEntry{p, path.Join("stream", filepath.ToSlash(rel), filepath.ToSlash(r))})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	man := &ArchiveManifest{Format: archiveFormat, Run: run, Created: time.Now().UTC(), Bytes: sr.Bytes}
	if roster != "" {
		entries = append(entries, archiveEntry{roster, "keys/roster.json"})
		man.Roster = true
	}
	seen := map[string]bool{}
	var dirs []string
	for _, d := range receipts {
		if d = filepath.Clean(d); d != "" && !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	for i, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() || !strings.HasSuffix(p, ".json") {
				return err
			}
			r, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			name := path.Join("receipts", filepath.ToSlash(r))
			if len(dirs) > 1 {
				sub := filepath.Dir(r)
				if sub == "." {
					sub = filepath.Base(dir)
				}
				sub = strings.ReplaceAll(filepath.ToSlash(sub), "/", "_")
				name = path.Join("receipts", fmt.Sprintf("%d-%s", i+1, sub), filepath.Base(r))
			}
			entries = append(entries, archiveEntry{p, name})
			man.Receipts++
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("receipts %s: %w", dir, err)
		}
	}
	man.Files = len(entries)
	h := sha256.New()
	for _, e := range entries {
		f, err := os.Open(e.src)
		if err != nil {
			return nil, err
		}
		io.WriteString(h, e.name+"\x00")
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	man.SHA256 = hex.EncodeToString(h.Sum(nil))
	if err := atomicfile.Write(out, outPerm, func(f io.Writer) error { return writeArchive(f, man, entries) }); err != nil {
		return nil, fmt.Errorf("writing %s: %w", out, err)
	}
	return man, nil
}

// archiveEntry is a file of an archive: its source and its name there.
type archiveEntry struct{ src, name string }

// writeArchive writes man and its entries to f: a gzip tar, the manifest
// first.
func writeArchive(f io.Writer, man *ArchiveManifest, entries []archiveEntry) (err error) {
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	mj, _ := json.MarshalIndent(man, "", "  ")
	if err = tw.WriteHeader(&tar.Header{Name: "manifest.json", Mode: 0o644, Size: int64(len(mj)), ModTime: man.Created}); err == nil {
		_, err = tw.Write(mj)
	}
	for _, e := range entries {
		if err != nil {
			break
		}
		var fi os.FileInfo
		if fi, err = os.Stat(e.src); err != nil {
			break
		}
		if err = tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: fi.Size(), ModTime: fi.ModTime()}); err != nil {
			break
		}
		var src *os.File
		if src, err = os.Open(e.src); err != nil {
			break
		}
		_, err = io.CopyN(tw, src, fi.Size())
		src.Close()
	}
	for _, c := range []io.Closer{tw, zw} {
		if cerr := c.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// OpenArchive unpacks a run archive (ExportRun) into a new temporary
// folder and checks it against its manifest: dir/stream is the run's
// store, dir/keys/roster.json its roster and dir/receipts the receipts,
// when the archive has them. done removes the folder. Paths outside the
// archive's folders, links and other special entries, and contents that
// do not match the manifest's digest are refused (ErrArchive).
func OpenArchive(file string) (dir string, man *ArchiveManifest, done func(), err error) {
	f, err := os.Open(file)
	if err != nil {
		return "", nil, nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return "", nil, nil, fmt.Errorf("%s: %w: %v", file, ErrArchive, err)
	}
	dir, err = os.MkdirTemp("", "asyrevel-archive-")
	if err != nil {
		return "", nil, nil, err
	}
	done = func() { os.RemoveAll(dir) }
	fail := func(format string, a ...any) (string, *ArchiveManifest, func(), error) {
		done()
		return "", nil, nil, fmt.Errorf("%s: %w: %s", file, ErrArchive, fmt.Sprintf(format, a...))
	}
	tr := tar.NewReader(zr)
	h := sha256.New()
	var total int64
	files := 0
	for first := true; ; first = false {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail("%v", err)
		}
		if hd.Typeflag != tar.TypeReg {
			return fail("entry %q is not a regular file", hd.Name)
		}
		if first {
			if hd.Name != "manifest.json" || hd.Size > 1<<20 {
				return fail("it does not start with its manifest")
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return fail("manifest: %v", err)
			}
			man = &ArchiveManifest{}
			if err := json.Unmarshal(b, man); err != nil || man.Format != archiveFormat || man.Run == "" {
				return fail("manifest: format %d, run %q (%v)", man.Format, man.Run, err)
			}
			continue
		}
		name := path.Clean(hd.Name)
		top, _, _ := strings.Cut(name, "/")
		if name != hd.Name || !fs.ValidPath(name) || (top != "stream" && top != "keys" && top != "receipts") || hd.Size < 0 {
			return fail("entry %q is outside the archive's folders", hd.Name)
		}
		if total += hd.Size; total > maxArchiveBytes {
			return fail("more than %d bytes", int64(maxArchiveBytes))
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			done()
			return "", nil, nil, err
		}
		out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fail("entry %q: %v", hd.Name, err)
		}
		io.WriteString(h, name+"\x00")
		_, err = io.Copy(io.MultiWriter(out, h), io.LimitReader(tr, hd.Size))
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fail("entry %q: %v", hd.Name, err)
		}
		files++
	}
	if man == nil {
		return fail("it is empty")
	}
	if files != man.Files || hex.EncodeToString(h.Sum(nil)) != man.SHA256 {
		return fail("its contents do not match its manifest (%d files, want %d): damaged or altered", files, man.Files)
	}
	if _, err := os.Stat(filepath.Join(dir, "stream", "jetstream")); err != nil {
		return fail("it holds no stream")
	}
	return dir, man, done, nil
}
