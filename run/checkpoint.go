package run

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/internal/atomicfile"
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/trust"
)

// Checkpoints: with Config.CheckpointDir set, the aggregator and each
// party save their state into DIR/RUN/aggregator.ckpt and
// DIR/RUN/party-M.ckpt (written atomically) when training starts, every
// CheckpointEvery and when interrupted. Config.Resume restarts a
// participant from its file and the run's stream (see the aggregator and
// party packages): the stream, not the checkpoint, is the truth; the
// checkpoint only shortens the replay.

// ErrNoCheckpoint reports --resume without a checkpoint to resume from.
var ErrNoCheckpoint = errors.New("no checkpoint to resume from")

// ErrResumeTrust reports Train with Config.Resume and the trust layer on
// but no folder that keeps the run's keys: the first part's keys were in
// a temporary folder, removed at its end, and a resumed participant must
// go on signing its chains with the same key.
var ErrResumeTrust = fmt.Errorf("%w: --resume with the trust layer needs the run's keys, which train keeps in --out DIR/keys (or --keys-dir): "+
	"the first part ran without either, so its keys are gone; start the run again (or run with --no-trust throughout)", ErrConfig)

// checkResumeTrust refuses Train's cfg.Resume with the trust layer on when
// the run's keys cannot have been kept, before anything is loaded.
func checkResumeTrust(cfg *job, train bool) error {
	if !cfg.Resume || cfg.Trust.Off || !train || runKeysDir(cfg) != "" {
		return nil
	}
	return ErrResumeTrust
}

// CheckpointPath is the file of a participant's checkpoints: role 0 is the
// aggregator, 1..q the parties.
func CheckpointPath(dir, run string, role int) string {
	name := "aggregator.ckpt"
	if role > 0 {
		name = fmt.Sprintf("party-%d.ckpt", role)
	}
	return filepath.Join(dir, run, name)
}

// checkpointing says whether cfg keeps checkpoints, and prepares their
// folder.
func (c *job) checkpointing() (bool, error) {
	if c.CheckpointEvery >= 0 && c.CheckpointDir == "" && c.heal != nil {
		return true, nil // kept in memory only, for a resume after a broker outage
	}
	if c.CheckpointDir == "" || c.CheckpointEvery < 0 {
		if c.Resume {
			return false, fmt.Errorf("%w: --resume needs --checkpoint-dir (where the checkpoints were written)", ErrConfig)
		}
		return false, nil
	}
	if err := os.MkdirAll(filepath.Join(c.CheckpointDir, c.Run), 0o755); err != nil {
		return false, fmt.Errorf("checkpoint folder: %w", err)
	}
	return true, nil
}

// encoder is a checkpoint that writes itself.
type encoder interface{ Encode(io.Writer) error }

// sealer seals checkpoint files with their owner's key (the trust layer):
// a file altered, or written by anyone else, does not open.
type sealer struct {
	key      *trust.Key // nil: plain files
	run, who string     // run id, participant id
}

// healState keeps each participant's latest checkpoint in memory, for
// the resume a participant of this process makes by itself after its
// broker connection was lost (see Config.heal).
type healState struct {
	mu  sync.Mutex
	ck  map[int][]byte // role -> the encoded checkpoint last saved
	out time.Duration  // time spent without a connection, over the resumes
	n   int            // resumes made
	// trained is the aggregator's training time when its connection was
	// last lost: the resumed aggregator's clock goes on from there, not
	// from its checkpoint's (up to --checkpoint-every earlier; the first
	// checkpoint's is 0), so that its curve's times do not go back.
	trained time.Duration
}

// lostAt records the aggregator's training time d at a lost connection.
func (h *healState) lostAt(d time.Duration) {
	h.mu.Lock()
	h.trained = max(h.trained, d)
	h.mu.Unlock()
}

// trainedAt is the aggregator's training time at its last lost
// connection (0: none).
func (h *healState) trainedAt() time.Duration {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.trained
}

// keep remembers role's checkpoint, encoded as b (kept as it is).
func (h *healState) keep(role int, b []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ck == nil {
		h.ck = map[int][]byte{}
	}
	h.ck[role] = b
}

// latest is role's checkpoint kept in memory (nil: none).
func (h *healState) latest(role int) []byte {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ck[role]
}

// checkpointHook saves role's checkpoints to path (none: memory only)
// and, when the participant heals itself, keeps the latest in memory.
func (c *job) checkpointHook(path string, role int, seal sealer) func(encoder) error {
	h := c.heal
	var last atomic.Int64 // the last encoding's size: the next buffer's, grown once
	return func(ck encoder) error {
		if h == nil {
			if path == "" {
				return nil
			}
			return saveCheckpoint(path, ck, seal)
		}
		// Encoded once, for the memory and the file: the encoding is most
		// of a save's cost, which sets the adaptive period (ckpt.Every).
		var buf bytes.Buffer
		n := int(last.Load())
		buf.Grow(n + n/8)
		if err := ck.Encode(&buf); err != nil {
			return err
		}
		last.Store(int64(buf.Len()))
		h.keep(role, buf.Bytes())
		if path == "" {
			return nil
		}
		return writeCheckpoint(path, buf.Bytes(), seal)
	}
}

// checkpointBytes is the checkpoint role resumes from: the one this
// process kept in memory (a resume after a lost connection), else the
// file at path.
func (c *job) checkpointBytes(path, who string, role int, seal sealer) ([]byte, error) {
	if b := c.heal.latest(role); b != nil {
		return b, nil
	}
	if path == "" {
		// Only a --resume of the command line gets here (a participant
		// that heals itself resumes only from a checkpoint it kept).
		return nil, fmt.Errorf("%w: --resume needs --checkpoint-dir (where the checkpoints were written)", ErrConfig)
	}
	return readCheckpointFile(path, who, seal)
}

func saveCheckpoint(path string, c encoder, s sealer) error {
	if s.key == nil {
		return atomicfile.Write(path, ckptPerm, c.Encode)
	}
	var buf bytes.Buffer
	if err := c.Encode(&buf); err != nil {
		return err
	}
	return writeCheckpoint(path, buf.Bytes(), s)
}

// writeCheckpoint writes the encoded checkpoint b to path, sealed with
// s's key if it has one.
func writeCheckpoint(path string, b []byte, s sealer) error {
	if s.key != nil {
		b = trust.SealState(s.key, s.run, s.who, b)
	}
	return atomicfile.WriteBytes(path, ckptPerm, b)
}

// ckptPerm is a checkpoint file's mode, less the umask (as os.Create).
const ckptPerm = 0o666

// ErrCheckpointSeal reports a checkpoint file whose seal does not verify.
var ErrCheckpointSeal = errors.New("the checkpoint file does not verify")

func readCheckpointFile(path, who string, s sealer) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has none at %s (was it started with the same --checkpoint-dir and --run, and did training start?)", ErrNoCheckpoint, who, path)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case s.key != nil:
		data, err := trust.OpenState(s.key, s.run, s.who, b)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w (a resume trusts only the state its owner saved)", ErrCheckpointSeal, path, err)
		}
		return data, nil
	case trust.IsSealedState(b):
		return nil, fmt.Errorf("%w: %s was written with the trust layer on: resume with the run's key and roster", ErrConfig, path)
	}
	return b, nil
}

// aggregatorCheckpoints sets the aggregator's checkpoint hook (and reads
// the checkpoint to resume from, if cfg.Resume).
func aggregatorCheckpoints(cfg *job, ac *aggregator.Config) (*aggregator.Checkpoint, error) {
	on, err := cfg.checkpointing()
	if !on || err != nil {
		return nil, err
	}
	path := ""
	if cfg.CheckpointDir != "" {
		path = CheckpointPath(cfg.CheckpointDir, cfg.Run, 0)
	}
	ac.CheckpointEvery = cfg.CheckpointEvery
	seal := sealer{cfg.trust.key(0), cfg.Run, trust.AggregatorID}
	save := cfg.checkpointHook(path, 0, seal)
	ac.OnCheckpoint = func(c *aggregator.Checkpoint) error {
		err := save(c)
		if h := cfg.hooks.onAggCheckpoint; h != nil && err == nil {
			h(c)
		}
		return err
	}
	if !cfg.Resume {
		return nil, nil
	}
	b, err := cfg.checkpointBytes(path, "the aggregator", 0, seal)
	if err != nil {
		return nil, err
	}
	c, err := aggregator.DecodeCheckpoint(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// After a lost connection the training time goes on from where it
	// was, the checkpoint's state from where it was saved (the stream
	// brings the rest).
	c.Training = max(c.Training, cfg.heal.trainedAt())
	return c, nil
}

// partyCheckpoints sets party m's checkpoint hook (and reads the
// checkpoint to resume from, if cfg.Resume).
func partyCheckpoints(cfg *job, pc *party.Config, m int) (*party.Checkpoint, error) {
	on, err := cfg.checkpointing()
	if !on || err != nil {
		return nil, err
	}
	path := ""
	if cfg.CheckpointDir != "" {
		path = CheckpointPath(cfg.CheckpointDir, cfg.Run, m)
	}
	pc.CheckpointEvery = cfg.CheckpointEvery
	seal := sealer{cfg.trust.key(m), cfg.Run, trust.PartyID(m)}
	save := cfg.checkpointHook(path, m, seal)
	pc.OnCheckpoint = func(c *party.Checkpoint) error {
		err := save(c)
		if h := cfg.hooks.onPartyCheckpoint; h != nil && err == nil {
			h(m, c)
		}
		return err
	}
	if !cfg.Resume {
		return nil, nil
	}
	b, err := cfg.checkpointBytes(path, fmt.Sprintf("party %d", m), m, seal)
	if err != nil {
		return nil, err
	}
	c, err := party.DecodeCheckpoint(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
