package run

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/party"
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

// ErrResumeTrust reports Config.Resume with the trust layer on:
// checkpoints do not hold its chains (head and sequence per subject), so
// a resumed participant could not go on signing them.
var ErrResumeTrust = fmt.Errorf("%w: --resume does not restore the trust layer's chains yet: run with --no-trust", ErrConfig)

// checkResumeTrust refuses cfg.Resume with the trust layer on, before
// anything is loaded: for Train (train) unless cfg.Trust.Off, for a
// separate participant when it has a key or a roster.
func checkResumeTrust(cfg *Config, train bool) error {
	tc := &cfg.Trust
	if !cfg.Resume || tc.Off {
		return nil
	}
	if train || tc.KeyFile != "" || tc.RosterFile != "" {
		return ErrResumeTrust
	}
	return nil
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
func (c *Config) checkpointing() (bool, error) {
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

func saveCheckpoint(path string, c encoder) error {
	return WriteFileAtomic(path, c.Encode)
}

func readCheckpointFile(path, who string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has none at %s (was it started with the same --checkpoint-dir and --run, and did training start?)", ErrNoCheckpoint, who, path)
	}
	return b, err
}

// aggregatorCheckpoints sets the aggregator's checkpoint hook (and reads
// the checkpoint to resume from, if cfg.Resume).
func aggregatorCheckpoints(cfg *Config, ac *aggregator.Config) (*aggregator.Checkpoint, error) {
	on, err := cfg.checkpointing()
	if !on || err != nil {
		return nil, err
	}
	path := CheckpointPath(cfg.CheckpointDir, cfg.Run, 0)
	ac.CheckpointEvery = cfg.CheckpointEvery
	ac.OnCheckpoint = func(c *aggregator.Checkpoint) error { return saveCheckpoint(path, c) }
	if !cfg.Resume {
		return nil, nil
	}
	b, err := readCheckpointFile(path, "the aggregator")
	if err != nil {
		return nil, err
	}
	c, err := aggregator.DecodeCheckpoint(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// partyCheckpoints sets party m's checkpoint hook (and reads the
// checkpoint to resume from, if cfg.Resume).
func partyCheckpoints(cfg *Config, pc *party.Config, m int) (*party.Checkpoint, error) {
	on, err := cfg.checkpointing()
	if !on || err != nil {
		return nil, err
	}
	path := CheckpointPath(cfg.CheckpointDir, cfg.Run, m)
	pc.CheckpointEvery = cfg.CheckpointEvery
	pc.OnCheckpoint = func(c *party.Checkpoint) error { return saveCheckpoint(path, c) }
	if !cfg.Resume {
		return nil, nil
	}
	b, err := readCheckpointFile(path, fmt.Sprintf("party %d", m))
	if err != nil {
		return nil, err
	}
	c, err := party.DecodeCheckpoint(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
