package ckpt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"hash"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
)

// Magic starts every checkpoint file written with the envelope.
const Magic = "ASYRCKPT"

// Errors of Decode; the roles wrap them in their own ErrResume.
var (
	// ErrFormat reports a checkpoint of the other role or of a format
	// version this build does not read.
	ErrFormat = errors.New("checkpoint of another format")
	// ErrDamaged reports a checkpoint cut short or altered: its length or
	// checksum does not match its content, or its state does not decode.
	ErrDamaged = errors.New("checkpoint damaged")
)

// trailerLen is the trailer's size: the state's length and its SHA-256.
const trailerLen = 8 + sha256.Size

// Encode writes state (gob) in the envelope of kind and version to w.
func Encode(w io.Writer, kind string, version int, state any) error {
	if len(kind) == 0 || len(kind) > 255 {
		return fmt.Errorf("ckpt: kind %q", kind)
	}
	head := make([]byte, 0, len(Magic)+1+len(kind)+4)
	head = append(head, Magic...)
	head = append(head, byte(len(kind)))
	head = append(head, kind...)
	head = binary.BigEndian.AppendUint32(head, uint32(version))
	if _, err := w.Write(head); err != nil {
		return err
	}
	cw := &counter{w: w, h: sha256.New()}
	if err := gob.NewEncoder(cw).Encode(state); err != nil {
		return err
	}
	tail := binary.BigEndian.AppendUint64(make([]byte, 0, trailerLen), uint64(cw.n))
	tail = cw.h.Sum(tail)
	_, err := w.Write(tail)
	return err
}

// counter counts and hashes what it passes on.
type counter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	return n, err
}

// Decode reads a checkpoint of kind and version from r into state. A
// file without the envelope (written before it) is decoded as the bare
// state: the caller checks the version the state holds. legacy reports
// such a file.
func Decode(r io.Reader, kind string, version int, state any) (legacy bool, err error) {
	_, legacy, err = DecodeVersions(r, kind, []int{version}, state)
	return legacy, err
}

// DecodeVersions is Decode for a role that reads several format
// versions: it returns the file's (0 for a file without the envelope),
// one of versions, whose first is the version this build writes.
func DecodeVersions(r io.Reader, kind string, versions []int, state any) (version int, legacy bool, err error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return 0, false, err
	}
	if !bytes.HasPrefix(data, []byte(Magic)) {
		if err := gob.NewDecoder(bytes.NewReader(data)).Decode(state); err != nil {
			return 0, true, fmt.Errorf("%w: not a checkpoint of this format, nor of the earlier bare one: %w", ErrDamaged, err)
		}
		return 0, true, nil
	}
	rest := data[len(Magic):]
	if len(rest) < 1 || len(rest) < 1+int(rest[0])+4 {
		return 0, false, fmt.Errorf("%w: cut short in its header (%d bytes)", ErrDamaged, len(data))
	}
	k := string(rest[1 : 1+int(rest[0])])
	rest = rest[1+int(rest[0]):]
	v := int(binary.BigEndian.Uint32(rest))
	rest = rest[4:]
	switch {
	case k != kind:
		return v, false, fmt.Errorf("%w: this is a checkpoint of the %s, not of the %s", ErrFormat, k, kind)
	case !slices.Contains(versions, v):
		return v, false, fmt.Errorf("%w: checkpoint format %d, this build reads %s", ErrFormat, v, versionList(versions))
	case len(rest) < trailerLen:
		return v, false, fmt.Errorf("%w: cut short (%d bytes, no trailer)", ErrDamaged, len(data))
	}
	body, tail := rest[:len(rest)-trailerLen], rest[len(rest)-trailerLen:]
	if n := binary.BigEndian.Uint64(tail); n != uint64(len(body)) {
		return v, false, fmt.Errorf("%w: %d bytes of state, the trailer says %d (cut short or appended to)", ErrDamaged, len(body), n)
	}
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], tail[8:]) {
		return v, false, fmt.Errorf("%w: its checksum does not match its content (the file was altered)", ErrDamaged)
	}
	if err := gob.NewDecoder(bytes.NewReader(body)).Decode(state); err != nil {
		return v, false, fmt.Errorf("%w: its state does not decode: %w", ErrDamaged, err)
	}
	return v, false, nil
}

// versionList is versions as the error of a file of another one says
// them ("3", "4 or 3").
func versionList(versions []int) string {
	s := make([]string, len(versions))
	for i, v := range versions {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, " or ")
}

// The adaptive period, the roles' default (a period of 0): the next save
// comes Factor times the last save's cost after it, MinEvery at the
// least and MaxEvery at the most, so saving takes at most ~2% of the CPU
// time (1/Factor) while a small state is saved often and a resume after an
// outage has little to apply again.
const (
	MinEvery = 250 * time.Millisecond
	MaxEvery = 10 * time.Second
	Factor   = 50
)

// DefaultEvery is the longest the roles wait between saves by default:
// MaxEvery, the adaptive period's cap.
const DefaultEvery = MaxEvery

// Every is the time from one save to the next: every when set (> 0),
// else (0: adaptive) Factor times took, the cost of the last save (its
// snapshot, and the CPU time of its encoding and write: not the broker's
// confirmation, nor the disk's sync; Save), between MinEvery and
// MaxEvery. A negative every (never) is returned as
// is; the caller does not save periodically.
func Every(every, took time.Duration) time.Duration {
	if every != 0 {
		return every
	}
	if took >= MaxEvery/Factor {
		return MaxEvery
	}
	return max(MinEvery, Factor*took)
}

// Bus is what Save needs of the broker.
type Bus interface {
	// Flush returns once the broker has stored everything published.
	Flush(ctx context.Context) error
	// Count is the number of messages in the stream under filter.
	Count(ctx context.Context, filter string) (uint64, error)
}

// ErrUnconfirmed is what Save logs when the broker did not confirm the
// messages the snapshot covers (it wraps the broker's error).
var ErrUnconfirmed = errors.New("the broker did not confirm the messages the checkpoint covers")

// FlushWait bounds the broker's confirmation of a save.
const FlushWait = 10 * time.Second

// ProbeWait bounds the stream count taken after a save.
const ProbeWait = 2 * time.Second

// Save is the save protocol's first half: once bus has stored every
// message published (FlushWait at most, even when ctx is done: an
// interrupted run saves its last state), hand saves the snapshot already
// taken. It reports whether the snapshot was saved, and logs to log why
// not: a broker that did not confirm (an error, but for a lost
// connection, known already: the role resumes from its last checkpoint)
// or hand's error. took is the CPU time hand took (0 if it did not run;
// its wall time where the thread's CPU clock cannot be read): with the
// snapshot's time, the save's cost to the run (Every), leaving out the
// wait for the broker, long only while it is slow or away, and the wait
// for the disk to sync the file (work). The second half is Probe, once
// the snapshot is saved.
func Save(ctx context.Context, bus Bus, log zerolog.Logger, hand func() error) (saved bool, took time.Duration) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), FlushWait)
	err := bus.Flush(fctx)
	cancel()
	switch {
	case errors.Is(err, broker.ErrConnLost):
		log.Debug().Err(err).Msg("checkpoint not saved")
		return false, 0
	case err != nil:
		log.Error().Err(fmt.Errorf("%w: %w", ErrUnconfirmed, err)).Msg("checkpoint not saved (a resume starts from the previous one)")
		return false, 0
	}
	took, err = work(hand)
	if err != nil {
		log.Error().Err(err).Msg("checkpoint not saved")
		return false, took
	}
	return true, took
}

// work runs hand and returns the CPU time it took, where the thread's
// CPU clock can be read, else its wall time. The CPU time is the save's
// cost to the run: encoding the state and writing it. Waiting for the
// disk to sync the file is not: training goes on meanwhile (the roles
// save off their training goroutines), and counting that wait made the
// period follow the disk's sync latency (10 to 30 ms a file, whatever its
// size, on the test machine) rather than the state's size: the
// aggregator saved every 1.4 to 3.2 s, and a resume after a broker
// outage applied again, and read, that much more of the stream.
func work(hand func() error) (time.Duration, error) {
	// The goroutine stays on one thread while hand runs, so that the
	// thread's clock is its own.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t, c0 := time.Now(), time.Duration(0)
	cpu, ok := threadCPU()
	if ok {
		c0 = cpu
	}
	err := hand()
	if ok {
		if c1, ok1 := threadCPU(); ok1 {
			return max(0, c1-c0), err
		}
	}
	return time.Since(t), err
}

// Probe takes the stream's message count under filter, within ProbeWait
// and ctx (a lost connection cancels ctx at once, and the count is
// optional: a failed one keeps the older, lower floor); ok is false when
// it failed. Taken after a save, the count lies below everything the
// role publishes from then on: the next checkpoint's floor.
func Probe(ctx context.Context, bus Bus, filter string) (count uint64, ok bool) {
	pctx, cancel := context.WithTimeout(ctx, ProbeWait)
	n, err := bus.Count(pctx, filter)
	cancel()
	return n, err == nil
}
