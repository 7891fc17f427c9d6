package replay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/schemas"
)

// Sentinel errors.
var (
	// ErrNoRun reports a store or server without the run's stream.
	ErrNoRun = errors.New("replay: no such run")
	// ErrSource reports an unusable Source.
	ErrSource = errors.New("replay: bad source")
	// ErrStoreInUse reports a store folder held by a live process.
	ErrStoreInUse = broker.ErrStoreInUse
)

// Source names a run's log: a store folder of a stopped run or a live NATS
// server (exactly one of Store and URL), and the run.
type Source struct {
	// Store is the JetStream store folder of a stopped run (train --store
	// DIR, or OUT/stream of train --out OUT). Open starts an embedded
	// server on it, in this process, without a listener.
	Store string
	// URL is a NATS server with the run's stream.
	URL string
	// Run is the run id: the stream is ASYREVEL_<Run>.
	Run string
	// Options are extra nats.go options for URL (credentials, TLS).
	Options []nats.Option
	// Direct reads the stream message by message (JetStream direct get)
	// instead of through a consumer: what an auditor's broker user may
	// do (trust.Roster.Auditors: stream info and direct get, nothing
	// else), on a stream that allows it. Slower: a request a message.
	Direct bool
}

// Info describes the run's stream when it was opened.
type Info struct {
	Run      string    `json:"run"`
	Stream   string    `json:"stream"`
	Messages uint64    `json:"messages"`
	Bytes    uint64    `json:"bytes"`
	FirstSeq uint64    `json:"first_seq"`
	LastSeq  uint64    `json:"last_seq"`
	First    time.Time `json:"first_time"`
	Last     time.Time `json:"last_time"`
	Created  time.Time `json:"created"`
	// Subjects is the stream's subject filter; DenyDelete and DenyPurge
	// say whether the log is protected against deletion (an audit log
	// must be).
	Subjects   []string `json:"subjects"`
	DenyDelete bool     `json:"deny_delete"`
	DenyPurge  bool     `json:"deny_purge"`
}

// Log is an open run log. Its methods may be called from several
// goroutines; each Reader is for one goroutine.
type Log struct {
	src  Source
	srv  *broker.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	st   jetstream.Stream
	info Info
}

// Open opens the log of src.Run. For a store folder it first checks that
// no live process holds the folder (ErrStoreInUse), then starts an embedded
// server on it; Close stops it.
func Open(ctx context.Context, src Source) (*Log, error) {
	if err := schemas.CheckRun(src.Run); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSource, err)
	}
	if (src.Store == "") == (src.URL == "") {
		return nil, fmt.Errorf("%w: give exactly one of a store folder and a NATS URL", ErrSource)
	}
	l := &Log{src: src}
	opts := append([]nats.Option{nats.Name("asyrevel-replay")}, src.Options...)
	url := src.URL
	if src.Store != "" {
		if err := checkStore(src.Store, src.Run); err != nil {
			return nil, err
		}
		// A damaged store is read from a copy without its damaged
		// records (Damage lists them), never handed to the server as is.
		srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: src.Store, NoListen: true, SharedStoreLock: true, ScrubDamaged: true})
		if err != nil {
			return nil, fmt.Errorf("replay: opening the store %s: %w", src.Store, err)
		}
		l.srv = srv
		url = nats.DefaultURL // never dialled: the in-process pipe is used
		opts = append(opts, nats.InProcessServer(srv.InProcess()))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("replay: connect %s: %w", url, err)
	}
	l.nc = nc
	if l.js, err = jetstream.New(nc); err != nil {
		l.Close()
		return nil, fmt.Errorf("replay: jetstream: %w", err)
	}
	name := broker.StreamName(src.Run)
	if l.st, err = l.js.Stream(ctx, name); err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			err = fmt.Errorf("%w: %s has no stream %s%s", ErrNoRun, l.where(), name, l.otherRuns(ctx))
			l.Close()
			return nil, err
		}
		l.Close()
		return nil, fmt.Errorf("replay: stream %s: %w", name, err)
	}
	si, err := l.st.Info(ctx)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("replay: stream %s: %w", name, err)
	}
	l.info = Info{
		Run: src.Run, Stream: name,
		Messages: si.State.Msgs, Bytes: si.State.Bytes,
		FirstSeq: si.State.FirstSeq, LastSeq: si.State.LastSeq,
		First: si.State.FirstTime, Last: si.State.LastTime, Created: si.Created,
		Subjects: si.Config.Subjects, DenyDelete: si.Config.DenyDelete, DenyPurge: si.Config.DenyPurge,
	}
	return l, nil
}

func (l *Log) where() string {
	if l.src.Store != "" {
		return "store " + l.src.Store
	}
	return "server " + l.src.URL
}

// otherRuns lists the runs the server holds, for an error message.
func (l *Log) otherRuns(ctx context.Context) string {
	var runs []string
	names := l.js.StreamNames(ctx)
	for n := range names.Name() {
		if r, ok := strings.CutPrefix(n, "ASYREVEL_"); ok {
			runs = append(runs, r)
		}
	}
	if len(runs) == 0 {
		return " (it holds no asyrevel run)"
	}
	slices.Sort(runs)
	if len(runs) > 10 {
		runs = append(runs[:10], "...")
	}
	return " (runs there: " + strings.Join(runs, ", ") + ")"
}

// Info describes the stream as it was when the log was opened.
func (l *Log) Info() Info { return l.info }

// Run is the run id.
func (l *Log) Run() string { return l.src.Run }

// Damage lists the records of a store's files that failed the store's own
// checksum and were left out of what the log reads (broker.CheckStore);
// empty for a log read over a URL.
func (l *Log) Damage() []broker.DamagedRecord {
	if l.srv == nil {
		return nil
	}
	return l.srv.Damage().Damaged
}

// Close releases the connection and stops the embedded server of a store.
// Idempotent.
func (l *Log) Close() error {
	if l.nc != nil {
		l.nc.Close()
		l.nc = nil
	}
	if l.srv != nil {
		l.srv.Shutdown()
		l.srv = nil
	}
	return nil
}

// checkStore checks that dir looks like a JetStream store and that no
// other process (a nats-server started by hand, say) has one of its files
// open (Linux). The store lock that asyrevel's servers take is checked
// when the embedded server starts (broker.ServerConfig.SharedStoreLock).
func checkStore(dir, run string) error {
	st, err := os.Stat(filepath.Join(dir, "jetstream"))
	if err != nil || !st.IsDir() {
		return fmt.Errorf("%w: %s is not a JetStream store folder (no jetstream/ inside): give the --store of the run, or OUT/stream of train --out OUT", ErrSource, dir)
	}
	if pids := holders(dir); len(pids) > 0 {
		return fmt.Errorf("%w: %s has files open in process %s (a live broker or run?); stop it first, or read the run through that broker with --nats URL",
			ErrStoreInUse, dir, strings.Join(pids, ", "))
	}
	return nil
}

// holders lists the other processes with a file under dir open (Linux
// /proc; elsewhere, or for processes this user may not inspect, none).
func holders(dir string) []string {
	if runtime.GOOS != "linux" {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	prefix := abs + string(filepath.Separator)
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := strconv.Itoa(os.Getpid())
	var pids []string
	for _, p := range procs {
		pid := p.Name()
		if pid == self || pid[0] < '0' || pid[0] > '9' {
			continue
		}
		fds, err := os.ReadDir(filepath.Join("/proc", pid, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join("/proc", pid, "fd", fd.Name()))
			if err == nil && strings.HasPrefix(target, prefix) && !strings.HasSuffix(target, string(filepath.Separator)+broker.StoreLockFile) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}
