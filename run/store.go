package run

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
)

// ErrNotStore reports a directory that is not an asyrevel broker store:
// store commands never remove such a directory.
var ErrNotStore = errors.New("not an asyrevel store")

// Store is a broker store directory as the embedded broker writes it: a
// single server's (DIR/jetstream/<account>/streams/ASYREVEL_<run>/...), or
// a cluster's (DIR/node-N/...).
type Store struct {
	Dir     string     // the store directory
	Cluster bool       // DIR holds node-N stores of an embedded cluster
	Runs    []StoreRun // by run id
	Bytes   int64      // everything under Dir
}

// StoreRun is one run's stream in a store.
type StoreRun struct {
	Run      string
	Bytes    int64     // on disk, over all the nodes that hold it
	Modified time.Time // the newest file of the stream
	dirs     []string
}

// storeIn is the store directory of an --out folder.
func storeIn(out string) string { return filepath.Join(out, "stream") }

// OpenStore reads the layout of the store at dir, or of the store in dir
// if dir is an --out folder of `asyrevel train` (dir/stream). It returns an
// error wrapping ErrNotStore if dir holds anything else than the streams of
// asyrevel runs.
func OpenStore(dir string) (*Store, error) {
	if fi, err := os.Stat(dir); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%s: %w: not a directory", dir, ErrNotStore)
	}
	if _, err := os.Stat(filepath.Join(dir, "jetstream")); err != nil {
		if fi, err := os.Stat(storeIn(dir)); err == nil && fi.IsDir() {
			dir = storeIn(dir)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	st := &Store{Dir: dir}
	var servers []string
	switch {
	case len(entries) == 0:
		return st, nil // a new store
	case slices.ContainsFunc(entries, func(e fs.DirEntry) bool { return e.Name() == "jetstream" }):
		servers = []string{dir}
	case len(entries) > 0 && !slices.ContainsFunc(entries, func(e fs.DirEntry) bool { return !strings.HasPrefix(e.Name(), "node-") }):
		st.Cluster = true
		for _, e := range entries {
			servers = append(servers, filepath.Join(dir, e.Name()))
		}
	default:
		return nil, fmt.Errorf("%s: %w: it has no jetstream folder (a broker store has DIR/jetstream/...)%s", dir, ErrNotStore, listed(entries))
	}
	runs := map[string]*StoreRun{}
	for _, srv := range servers {
		top, err := os.ReadDir(srv)
		if err != nil {
			return nil, err
		}
		if other := slices.DeleteFunc(top, func(e fs.DirEntry) bool {
			return e.Name() == "jetstream" && e.IsDir() || e.Name() == broker.StoreLockFile && e.Type().IsRegular()
		}); len(other) > 0 {
			return nil, fmt.Errorf("%s: %w: besides its jetstream folder it holds%s", srv, ErrNotStore, listed(other))
		}
		accounts, err := os.ReadDir(filepath.Join(srv, "jetstream"))
		if err != nil {
			return nil, err
		}
		for _, acc := range accounts {
			streams := filepath.Join(srv, "jetstream", acc.Name(), "streams")
			if !acc.IsDir() {
				return nil, fmt.Errorf("%s: %w: unexpected file %s in its jetstream folder", srv, ErrNotStore, acc.Name())
			}
			list, err := os.ReadDir(streams)
			if errors.Is(err, fs.ErrNotExist) {
				continue // the system account of a cluster: no streams
			}
			if err != nil {
				return nil, err
			}
			for _, s := range list {
				name := s.Name()
				run, ok := strings.CutPrefix(name, broker.StreamName(""))
				if !ok || !s.IsDir() {
					return nil, fmt.Errorf("%s: %w: it holds the stream %s, which is not an asyrevel run's", srv, ErrNotStore, name)
				}
				r := runs[run]
				if r == nil {
					r = &StoreRun{Run: run}
					runs[run] = r
				}
				d := filepath.Join(streams, name)
				b, mod, err := dirSize(d)
				if err != nil {
					return nil, err
				}
				r.Bytes += b
				if mod.After(r.Modified) {
					r.Modified = mod
				}
				r.dirs = append(r.dirs, d)
			}
		}
	}
	if st.Bytes, _, err = dirSize(dir); err != nil {
		return nil, err
	}
	for _, r := range runs {
		st.Runs = append(st.Runs, *r)
	}
	sort.Slice(st.Runs, func(i, j int) bool { return st.Runs[i].Modified.Before(st.Runs[j].Modified) })
	return st, nil
}

func listed(entries []fs.DirEntry) string {
	if len(entries) == 0 {
		return ""
	}
	var names []string
	for _, e := range entries[:min(len(entries), 5)] {
		names = append(names, e.Name())
	}
	if len(entries) > 5 {
		names = append(names, "...")
	}
	return " (" + strings.Join(names, ", ") + ")"
}

// Remove deletes the whole store. It refuses (broker.ErrStoreInUse) while
// a broker or run of this process tree holds the store's lock.
func (s *Store) Remove() error {
	release, err := s.lock()
	if err != nil {
		return err
	}
	defer release()
	return os.RemoveAll(s.Dir)
}

// lock takes the lock of every server folder of the store, so that no
// embedded broker runs on it while it is changed.
func (s *Store) lock() (release func(), err error) {
	var rels []func() error
	release = func() {
		for _, r := range rels {
			_ = r()
		}
	}
	dirs := []string{s.Dir}
	if s.Cluster {
		entries, err := os.ReadDir(s.Dir)
		if err != nil {
			return nil, err
		}
		dirs = dirs[:0]
		for _, e := range entries {
			dirs = append(dirs, filepath.Join(s.Dir, e.Name()))
		}
	}
	for _, d := range dirs {
		r, err := broker.LockStore(d, false)
		if err != nil {
			release()
			return nil, err
		}
		rels = append(rels, r)
	}
	return release, nil
}

// RemoveRun deletes one run's stream from a single server's store. Stop
// the broker that serves it first. A cluster's streams are also recorded
// in the cluster's metadata: remove a cluster's store as a whole.
func (s *Store) RemoveRun(run string) error {
	if s.Cluster {
		return fmt.Errorf("%s is an embedded cluster's store, whose metadata also records each stream: remove the whole store", s.Dir)
	}
	for _, r := range s.Runs {
		if r.Run == run {
			release, err := s.lock()
			if err != nil {
				return err
			}
			defer release()
			for _, d := range r.dirs {
				if err := os.RemoveAll(d); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return fmt.Errorf("%s holds no run %q (it holds %s)", s.Dir, run, s.runNames())
}

func (s *Store) runNames() string {
	if len(s.Runs) == 0 {
		return "none"
	}
	var names []string
	for _, r := range s.Runs {
		names = append(names, r.Run)
	}
	return strings.Join(names, ", ")
}

// dirSize sums the sizes of the regular files under dir and finds the
// newest modification.
func dirSize(dir string) (n int64, newest time.Time, err error) {
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking (a server compacting)
			}
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return nil
			}
			n += fi.Size()
			if fi.ModTime().After(newest) {
				newest = fi.ModTime()
			}
		}
		return nil
	})
	return n, newest, err
}

// MB formats a byte count for people, in binary units (GiB, MiB, KiB:
// the flags take both kinds, 500MB being 500,000,000 bytes; before, 2 MB
// given was shown as "1.9 MB").
func MB(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
}

// dirOf is filepath.Dir of a cleaned path.
func dirOf(p string) string { return filepath.Dir(filepath.Clean(p)) }

// outEntries are what Train writes into an --out folder: one run's
// record (its log in stream/, its keys and roster, the parties' receipts,
// the checkpoints, the models and the outputs).
var outEntries = []string{"stream", "keys", "receipts", "checkpoints", "models",
	"summary.json", "curve.csv", "curve.png", "privacy.json", "report.html"}

// EarlierDir is the folder of an --out folder where a new run keeps the
// runs that were there before it, one folder each (OUT/earlier/RUN).
func EarlierDir(out string) string { return filepath.Join(out, "earlier") }

// keepEarlier makes room in cfg.Out for a new run of Train: an --out
// folder describes one run, and a run there before this one is moved, whole,
// to OUT/earlier/RUN (RUN.2, ... if taken), where its log, receipts and
// roster stay together and its audit stays intact (audit verify --store
// OUT/earlier/RUN/stream). With cfg.ReplaceOut it is removed instead. A
// folder at OUT/stream that is not a store is left alone, and the run
// refused; a store that a running broker holds is neither moved nor
// removed (broker.ErrStoreInUse).
func keepEarlier(cfg *job) error {
	out := cfg.Out
	var present []string
	for _, e := range outEntries {
		if _, err := os.Lstat(filepath.Join(out, e)); err == nil {
			present = append(present, e)
		}
	}
	if len(present) == 0 {
		return nil
	}
	var st *Store
	if slices.Contains(present, "stream") {
		s, err := OpenStore(storeIn(out))
		if err != nil {
			return fmt.Errorf("%w: %s is where --out keeps the run's store, and it %w: choose another --out, or a store with --store", ErrConfig, storeIn(out), err)
		}
		st = s
		release, err := st.lock()
		if err != nil {
			return fmt.Errorf("%w: the --out folder %s: %w", ErrConfig, out, err)
		}
		defer release()
	}
	run := earlierRun(out, st)
	var size int64
	for _, e := range present {
		n, _, _ := dirSize(filepath.Join(out, e))
		size += n
	}
	if cfg.ReplaceOut {
		cfg.hooks.Log.Info().Str("out", out).Str("run", run).Str("size", MB(size)).Strs("removed", present).
			Msg("removing the earlier run in this --out folder (--replace)")
		for _, e := range present {
			if err := os.RemoveAll(filepath.Join(out, e)); err != nil {
				return fmt.Errorf("removing the earlier run in %s: %w", out, err)
			}
		}
		return nil
	}
	dest, err := newEarlierDir(out, run)
	if err != nil {
		return err
	}
	for _, e := range present {
		if err := os.Rename(filepath.Join(out, e), filepath.Join(dest, e)); err != nil {
			return fmt.Errorf("keeping the earlier run of %s in %s: %w", out, dest, err)
		}
	}
	msg := fmt.Sprintf("keeping the earlier run in this --out folder in %s, whole (--replace removes it instead)", dest)
	if slices.Contains(present, "stream") {
		msg += fmt.Sprintf("; asyrevel audit verify --store %s --run %s", storeIn(dest), run)
	}
	cfg.hooks.Log.Info().Str("run", run).Str("size", MB(size)).Msg(msg)
	return nil
}

// earlierRun is the run id of the run in an --out folder: its roster's,
// else its store's, else "run".
func earlierRun(out string, st *Store) string {
	var roster struct {
		Run string `json:"run"`
	}
	if b, err := os.ReadFile(filepath.Join(out, "keys", "roster.json")); err == nil && json.Unmarshal(b, &roster) == nil && safeName(roster.Run) {
		return roster.Run
	}
	if st != nil && len(st.Runs) > 0 && safeName(st.Runs[len(st.Runs)-1].Run) {
		return st.Runs[len(st.Runs)-1].Run
	}
	return "run"
}

// safeName reports whether s can name a folder: letters, digits, '-',
// '_' and '.', not starting with '.'.
func safeName(s string) bool {
	if s == "" || s[0] == '.' || len(s) > 200 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// newEarlierDir makes OUT/earlier/RUN, or RUN.2, RUN.3, ... if taken.
func newEarlierDir(out, run string) (string, error) {
	base := EarlierDir(out)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", fmt.Errorf("keeping the earlier run of %s: %w", out, err)
	}
	for i := 1; ; i++ {
		name := run
		if i > 1 {
			name = fmt.Sprintf("%s.%d", run, i)
		}
		dest := filepath.Join(base, name)
		err := os.Mkdir(dest, 0o755)
		if err == nil {
			return dest, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("keeping the earlier run of %s: %w", out, err)
		}
	}
}

// The bound of a run's stream (Config.MaxStore, --max-store) never exceeds
// what the disk under the store can hold: a bound above it would let the
// disk fill first, and the run then stops on the broker's write error
// instead of pausing, sealed, before its bound.

// freeSpace is the disk space free at dir (freeBytes; tests stand in a
// small disk for it).
var freeSpace = freeBytes

// defaultMaxStore is the default bound of a run's stream in a store at
// dir: 80% of the disk space free there, so that a run pauses before the
// disk is full; -1 (no bound) where the free space cannot be read.
func defaultMaxStore(dir string) int64 {
	free, err := freeSpace(dir)
	if err != nil || free <= 0 {
		return -1
	}
	return free / 10 * 8
}

// diskRoom is the most a run's stream in the store at dir may hold: what
// it holds already (held) and the free space there, less a twentieth of
// it for the server's own files; ok is false where the free space cannot
// be read.
func diskRoom(dir string, held int64) (room int64, ok bool) {
	free, err := freeSpace(dir)
	if err != nil || free <= 0 {
		return 0, false
	}
	return held + free/20*19, true
}

// runBytes is what run's stream takes in the store at dir (0: none).
func runBytes(dir, run string) int64 {
	st, err := OpenStore(dir)
	if err != nil {
		return 0
	}
	for _, r := range st.Runs {
		if r.Run == run {
			return r.Bytes
		}
	}
	return 0
}

// storeBound is the bound of run's stream in the store at dir, given
// want (Config.MaxStore: 0 for the default, negative for none): by
// default 80% of the free space, plus what the stream holds on a resume
// (a run that paused full goes on once space is freed: raiseBound lifts
// the bound); never more than the disk can hold (diskRoom), and a bound
// given that would be is lowered, with a warning.
func storeBound(dir, run string, want int64, resume bool, log zerolog.Logger) int64 {
	if want < 0 {
		return want
	}
	var held int64
	if resume {
		held = runBytes(dir, run)
	}
	room, ok := diskRoom(dir, held)
	if want == 0 {
		d := defaultMaxStore(dir)
		if d <= 0 {
			return d
		}
		want = d + held
	} else if ok && want > room {
		log.Warn().Str("max_store", MB(want)).Str("store", dir).Str("room", MB(room)).
			Msg("--max-store is more than the disk under the store can hold: the run's stream is bounded by the disk's free space instead")
	}
	if ok {
		want = min(want, room)
	}
	return want
}
