package broker

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/minio/highwayhash"
	"github.com/nats-io/nats-server/v2/server"
)

// ErrStoreDamaged reports a store whose message files hold records that
// fail their own checksum or cannot be read. The server is not started on
// such a store: nats-server trusts a record's sequence number before it
// checks the record, and one flipped bit there once made it fill a
// billion-entry deleted set (6.6 GiB, then the kernel's kill). ScrubStore
// copies what is intact.
var ErrStoreDamaged = errors.New("store damaged")

// The layout of a record in a nats-server message block (filestore.go):
// total_len(4) sequence(8) timestamp(8) subj_len(2) subj [hdr_len(4) hdr]
// msg hash(8); the high bit of total_len marks headers, the two high bits
// of the sequence a tombstone and an erased record. The hash is
// HighwayHash-64 keyed by sha256("<stream>-<block index>") over sequence,
// timestamp, subject, headers and message.
const (
	recHdrSize  = 22
	recHashSize = 8
	recEmptyLen = recHdrSize + recHashSize
	recHdrBit   = 1 << 31
	recMaxLen   = 32 << 20 // nats-server's rlBadThresh
	// recTornMax is the longest record a torn tail may be cut from: the
	// largest message an embedded server takes (MaxPayload: 4 MiB by
	// default, 8 MiB in experiments) with room for subject and headers.
	// A longer length past the block's end is damage, not a cut write.
	recTornMax = 9 << 20
)

// DamagedRecord is one record of a message block that the store's own
// checksum or layout refuses.
type DamagedRecord struct {
	Block  string // the block file, relative to the store directory
	Offset int64  // the record's offset in the (decompressed) block
	Seq    uint64 // the sequence as written, which may itself be damaged
	Reason string
}

func (d DamagedRecord) String() string {
	return fmt.Sprintf("%s at offset %d (sequence %d as written): %s", d.Block, d.Offset, d.Seq, d.Reason)
}

// StoreCheck is what CheckStore found in a store's message blocks.
type StoreCheck struct {
	Blocks  int // message block files read
	Records int // records whose checksum holds
	Damaged []DamagedRecord
	// TornTails are blocks whose last record is incomplete: what a broker
	// killed in the middle of a write leaves. The server cuts them off
	// itself; they are not damage.
	TornTails []string
	// Skipped are blocks not checked (encrypted, or a compression this
	// check does not read), with the reason.
	Skipped []string
}

// Err is nil for an undamaged store, or an error wrapping ErrStoreDamaged
// that names the first damaged records.
func (c StoreCheck) Err(dir string) error {
	if len(c.Damaged) == 0 {
		return nil
	}
	var b strings.Builder
	for i, d := range c.Damaged {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(c.Damaged)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(d.String())
	}
	return fmt.Errorf("%w: %s: %d of %d records in its message files fail their checksum or cannot be read: %s",
		ErrStoreDamaged, dir, len(c.Damaged), c.Records+len(c.Damaged), b.String())
}

// CheckStore reads every message block of every stream in the store at
// dir (a server's store, or the node-N folders of a cluster's) and checks
// each record's length, sequence order and checksum. A missing or empty
// dir is an empty store.
func CheckStore(dir string) (StoreCheck, error) {
	var c StoreCheck
	blocks, err := storeBlocks(dir)
	if err != nil {
		return c, err
	}
	for _, b := range blocks {
		if _, err := checkBlock(dir, b, &c, false); err != nil {
			return c, err
		}
	}
	return c, nil
}

// ScrubStore copies the store at src to dst (which must not exist),
// leaving out the records CheckStore finds damaged. A block's index
// (msgs/index.db) is left out where a block changed, so the server
// rebuilds it from the records. The copy is what the store held, less the
// damaged records: a reader of the copy sees holes where they were.
func ScrubStore(src, dst string) (StoreCheck, error) {
	var c StoreCheck
	if _, err := os.Stat(dst); err == nil {
		return c, fmt.Errorf("%w: %s exists", ErrInvalid, dst)
	}
	blocks, err := storeBlocks(src)
	if err != nil {
		return c, err
	}
	scrubbed := map[string][]byte{} // block path relative to src -> kept bytes
	for _, b := range blocks {
		before := len(c.Damaged)
		kept, err := checkBlock(src, b, &c, true)
		if err != nil {
			return c, err
		}
		if len(c.Damaged) > before {
			scrubbed[b.rel] = kept
		}
	}
	dirty := map[string]bool{} // msgs folders whose index must be rebuilt
	for rel := range scrubbed {
		dirty[filepath.Dir(rel)] = true
	}
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(out, 0o700)
		case rel == StoreLockFile:
			return nil
		case scrubbed[rel] != nil:
			return os.WriteFile(out, scrubbed[rel], 0o600)
		case dirty[filepath.Dir(rel)] && d.Name() == "index.db":
			return nil
		case !d.Type().IsRegular():
			return nil
		}
		return copyFile(p, out)
	})
	if err != nil {
		return c, fmt.Errorf("scrubbing the store %s into %s: %w", src, dst, err)
	}
	return c, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// storeBlock is one message block file of a stream.
type storeBlock struct {
	rel    string // relative to the store directory
	stream string // the stream's name, the hash key's first part
	index  uint32 // from N.blk
	last   bool   // the stream's last block
}

// storeBlocks lists the message blocks of every stream under dir
// (.../streams/<stream>/msgs/<N>.blk), in order of stream and index.
func storeBlocks(dir string) ([]storeBlock, error) {
	var blocks []storeBlock
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == dir {
				return filepath.SkipAll
			}
			return err
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".blk") {
			return nil
		}
		msgs := filepath.Dir(p)
		stream := filepath.Dir(msgs)
		if filepath.Base(msgs) != "msgs" || filepath.Base(filepath.Dir(stream)) != "streams" {
			return nil
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(d.Name(), ".blk"), 10, 32)
		if err != nil {
			return nil // not a block of nats-server's naming
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		blocks = append(blocks, storeBlock{rel: rel, stream: filepath.Base(stream), index: uint32(n)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the store %s: %w", dir, err)
	}
	sort.Slice(blocks, func(i, j int) bool {
		di, dj := filepath.Dir(blocks[i].rel), filepath.Dir(blocks[j].rel)
		if di != dj {
			return di < dj
		}
		return blocks[i].index < blocks[j].index
	})
	for i := range blocks {
		blocks[i].last = i == len(blocks)-1 || filepath.Dir(blocks[i+1].rel) != filepath.Dir(blocks[i].rel)
	}
	return blocks, nil
}

// checkBlock checks one block's records into c. With keep it returns the
// block's bytes without its damaged records (uncompressed).
func checkBlock(dir string, b storeBlock, c *StoreCheck, keep bool) ([]byte, error) {
	raw, err := os.ReadFile(filepath.Join(dir, b.rel))
	if err != nil {
		return nil, fmt.Errorf("reading the store %s: %w", dir, err)
	}
	c.Blocks++
	buf := raw
	var meta server.CompressionInfo
	if n, err := meta.UnmarshalMetadata(raw); err != nil {
		c.Skipped = append(c.Skipped, fmt.Sprintf("%s: %v", b.rel, err))
		return raw, nil
	} else if n > 0 {
		if buf, err = meta.Algorithm.Decompress(raw[n:]); err != nil {
			// The server has its own answer to a block it cannot
			// decompress (and a rare record that looks like the
			// compression header): leave it to the server.
			c.Skipped = append(c.Skipped, fmt.Sprintf("%s: does not decompress: %v", b.rel, err))
			return raw, nil
		}
	}
	key := sha256.Sum256(fmt.Appendf(nil, "%s-%d", b.stream, b.index))
	hh, err := highwayhash.New64(key[:])
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	var kept []byte
	if keep {
		kept = make([]byte, 0, len(buf))
	}
	var sum [highwayhash.Size64]byte
	for i := 0; i < len(buf); {
		rest := len(buf) - i
		if rest < recEmptyLen {
			if b.last {
				c.TornTails = append(c.TornTails, b.rel)
			} else {
				c.Damaged = append(c.Damaged, DamagedRecord{Block: b.rel, Offset: int64(i), Reason: fmt.Sprintf("%d stray bytes at the end of the block", rest)})
			}
			break
		}
		hdr := buf[i : i+recHdrSize]
		rl := le.Uint32(hdr[0:])
		hasHdr := rl&recHdrBit != 0
		rl &^= recHdrBit
		seq := le.Uint64(hdr[4:])
		slen := int(le.Uint16(hdr[20:]))
		if rl < recEmptyLen || rl > recMaxLen || int(rl) > rest {
			if b.last && int(rl) > rest && rl <= recTornMax {
				c.TornTails = append(c.TornTails, b.rel)
			} else {
				c.Damaged = append(c.Damaged, DamagedRecord{Block: b.rel, Offset: int64(i), Seq: seq,
					Reason: fmt.Sprintf("record length %d with %d bytes left: the rest of the block cannot be read", rl, rest)})
			}
			break
		}
		rec := buf[i : i+int(rl)]
		body := rec[recHdrSize : len(rec)-recHashSize]
		reason := ""
		switch {
		case slen > len(body):
			reason = fmt.Sprintf("subject length %d beyond the record", slen)
		case hasHdr && slen+4 > len(body):
			reason = "headers length beyond the record"
		}
		if reason == "" {
			hh.Reset()
			hh.Write(hdr[4:20])
			hh.Write(body[:slen])
			if hasHdr {
				hl := int(le.Uint32(body[slen:]))
				if slen+4+hl > len(body) {
					reason = fmt.Sprintf("headers length %d beyond the record", hl)
				} else {
					hh.Write(body[slen+4:])
				}
			} else {
				hh.Write(body[slen:])
			}
			if reason == "" && string(hh.Sum(sum[:0])) != string(rec[len(rec)-recHashSize:]) {
				reason = "checksum mismatch"
			}
		}
		if reason == "" {
			// The checksum runs over subject, headers and message as one
			// stream of bytes: a damaged subject or headers length moves
			// a boundary and still passes. The server would then send a
			// subject holding message bytes (a space, a line end), which
			// breaks the client's protocol: its reader reconnected and
			// asked for the same record again, for ever (TestAuditVerify,
			// once under load).
			reason = checkLayout(body, slen, hasHdr)
		}
		if reason != "" {
			c.Damaged = append(c.Damaged, DamagedRecord{Block: b.rel, Offset: int64(i), Seq: seq, Reason: reason})
		} else {
			c.Records++
			if keep {
				kept = append(kept, rec...)
			}
		}
		i += int(rl)
	}
	return kept, nil
}

// checkLayout checks what the checksum cannot: that the subject is a
// literal subject and the headers a NATS header block.
func checkLayout(body []byte, slen int, hasHdr bool) string {
	subj := body[:slen]
	if slen == 0 || !utf8.Valid(subj) || bytes.ContainsFunc(subj, func(r rune) bool { return r <= ' ' || r == 0x7f }) ||
		!server.IsValidLiteralSubject(string(subj)) {
		return fmt.Sprintf("subject %q is not a subject (its length field damaged?)", truncate(subj, 40))
	}
	if !hasHdr {
		return ""
	}
	hl := int(binary.LittleEndian.Uint32(body[slen:]))
	if hl == 0 {
		return ""
	}
	hdr := body[slen+4 : slen+4+hl]
	if !bytes.HasPrefix(hdr, []byte("NATS/1.0")) || !bytes.HasSuffix(hdr, []byte("\r\n\r\n")) {
		return fmt.Sprintf("headers of %d bytes are not a header block (their length field damaged?)", hl)
	}
	return ""
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
