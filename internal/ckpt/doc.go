// Package ckpt is the checkpoint design the aggregator and the parties
// share: the file format's envelope, the atomic write, and the protocol
// that saves a snapshot only once the broker holds what it covers. Each
// role supplies its own state (a gob-encodable struct) and its own
// restore; this package knows nothing of either.
//
// # The envelope
//
// A checkpoint file is
//
//	magic "ASYRCKPT", the role's kind (one length byte and its name),
//	the role's format version (uint32, big-endian), the state (gob),
//	then a trailer: the state's length (uint64) and its SHA-256.
//
// Decode checks the magic, the kind, the version, the length and the
// checksum before it decodes the state, and says which failed: a file of
// the other role, of another build, cut short or altered. Files written
// before the envelope (the bare gob state) are still read: Decode decodes
// them as they are, and the role checks the version its state carries.
//
// # Saving
//
// Save runs the save protocol of both roles: the broker confirms every
// message published up to the snapshot (a checkpoint must never count as
// sent or applied a message the stream lacks), the snapshot is handed
// over, and the stream's message count is taken briefly, the floor below
// everything the role publishes from then on (the next checkpoint's
// StreamFloor). A checkpoint file is written with internal/atomicfile: to
// a temporary file, synced, renamed over the old one, and the folder
// synced, so that a crash leaves the old file or the new one, never a
// part.
package ckpt
