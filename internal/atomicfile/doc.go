// Package atomicfile writes a file whole or not at all: the content goes to
// a new temporary file beside the target, which is synced, closed and
// renamed over it (Write), or linked to it where nothing may be replaced
// (WriteNew). A reader never sees half a file, a crash leaves the old file
// or the new one, and a failed write leaves no temporary file behind.
//
// Every file the project writes for a user or for itself to read back (a
// run's summary and curves, checkpoints, keys and rosters, a party's data,
// the clients file, the report page) goes through it. It imports nothing of
// the project, so that any package may use it.
package atomicfile
