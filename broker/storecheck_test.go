package broker_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// storeWith writes n messages into a stream of a new store and returns
// the store and its one message block.
func storeWith(t *testing.T, n int) (dir, blk string) {
	t.Helper()
	return storeOf(t, n, true)
}

// storeOf is storeWith, the messages with a header (a message id) or
// without, all on t.0.
func storeOf(t *testing.T, n int, headers bool) (dir, blk string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir = t.TempDir()
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir, NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("", nats.InProcessServer(srv.InProcess()))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// A duplicate window makes the server read the stored messages back
	// when it recovers the stream (rebuildDedupe): where a damaged
	// sequence number used to run away.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ASYREVEL_t", Subjects: []string{"t.>"}, Duplicates: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		msg := &nats.Msg{Subject: "t.0", Data: fmt.Appendf(nil, "message %d", i)}
		if headers {
			msg.Subject, msg.Header = fmt.Sprintf("t.%d", i%3), nats.Header{}
			msg.Header.Set(nats.MsgIdHdr, fmt.Sprint(i))
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	nc.Close()
	srv.Shutdown()
	blks, _ := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", "ASYREVEL_t", "msgs", "*.blk"))
	if len(blks) != 1 {
		t.Fatalf("%d message blocks, want 1", len(blks))
	}
	return dir, blks[0]
}

// recordAt is the offset of the record of sequence seq in a block.
func recordAt(t *testing.T, b []byte, seq uint64) int {
	t.Helper()
	for i := 0; i+22 <= len(b); {
		rl := binary.LittleEndian.Uint32(b[i:]) &^ (1 << 31)
		if binary.LittleEndian.Uint64(b[i+4:]) == seq {
			return i
		}
		i += int(rl)
	}
	t.Fatalf("no record of sequence %d", seq)
	return 0
}

func streamMsgs(t *testing.T, srv *broker.Server) uint64 {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(srv.InProcess()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(context.Background(), "ASYREVEL_t")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// A flipped bit in a store's file is found by the store's own checksum,
// whatever it hits; the server is not started on it, and a reader gets
// the rest. The sequence-number case made nats-server fill a deleted set
// up to the damaged sequence (a billion entries: 6.6 GiB before memwatch
// stopped the test binary, the kernel's kill before that).
func TestDamagedStore(t *testing.T) {
	const n = 300
	cases := []struct {
		name string
		at   int // byte offset in record 150
		bit  byte
	}{
		{"sequence bit 30", 4 + 3, 0x40},
		{"timestamp", 12 + 2, 0x01},
		{"subject", 22, 0x20},
		{"payload", 30, 0x02},
		// The headers length (after the 3-byte subject): one byte more
		// or less of headers passes the checksum (it runs over headers
		// and message as one), not the header block's layout.
		{"headers length", 22 + 3, 0x01},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, blk := storeWith(t, n)
			b, err := os.ReadFile(blk)
			if err != nil {
				t.Fatal(err)
			}
			b[recordAt(t, b, 150)+tc.at] ^= tc.bit
			if err := os.WriteFile(blk, b, 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := broker.CheckStore(dir)
			if err != nil || len(c.Damaged) != 1 || c.Records != n-1 {
				t.Fatalf("check: %v, %d damaged, %d intact: %+v", err, len(c.Damaged), c.Records, c.Damaged)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir, NoListen: true}); !errors.Is(err, broker.ErrStoreDamaged) {
				if srv != nil {
					srv.Shutdown()
				}
				t.Fatalf("a damaged store started a server: %v", err)
			}
			srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir, NoListen: true, SharedStoreLock: true, ScrubDamaged: true})
			if err != nil {
				t.Fatal(err)
			}
			if got := streamMsgs(t, srv); got != n-1 {
				t.Errorf("the scrubbed store holds %d messages, want %d", got, n-1)
			}
			if d := srv.Damage().Damaged; len(d) != 1 {
				t.Errorf("damage %+v", d)
			}
			srv.Shutdown()
			after, _ := os.ReadFile(blk)
			if string(after) != string(b) {
				t.Error("the reader changed the damaged store")
			}
		})
	}
}

// A block whose last record was cut by a crash is not damage: the server
// drops the torn record itself.
func TestTornTailIsNotDamage(t *testing.T) {
	dir, blk := storeWith(t, 50)
	b, _ := os.ReadFile(blk)
	if err := os.WriteFile(blk, b[:len(b)-5], 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := broker.CheckStore(dir)
	if err != nil || len(c.Damaged) != 0 || len(c.TornTails) != 1 || c.Records != 49 {
		t.Fatalf("check: %v %+v", err, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir, NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if got := streamMsgs(t, srv); got != 49 {
		t.Errorf("%d messages after the torn tail, want 49", got)
	}
}

func TestScrubStoreRefusesAnExistingTarget(t *testing.T) {
	dir, _ := storeWith(t, 5)
	if _, err := broker.ScrubStore(dir, t.TempDir()); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("err %v", err)
	}
}

// A damaged record length (one past the block's end, or beyond any
// record's size) leaves the rest of its block unreadable: the records
// before it are kept, the damage is named, the server refuses the store.
func TestDamagedRecordLength(t *testing.T) {
	for _, bit := range []byte{0x01, 0x40} { // +16 MiB (past the block, longer than any message), +1 GiB (past any record)
		dir, blk := storeWith(t, 100)
		b, _ := os.ReadFile(blk)
		b[recordAt(t, b, 40)+3] ^= bit
		if err := os.WriteFile(blk, b, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := broker.CheckStore(dir)
		if err != nil || len(c.Damaged) != 1 || c.Records != 39 || len(c.TornTails) != 0 {
			t.Fatalf("bit %#x: %v, %d damaged, %d intact, torn %v", bit, err, len(c.Damaged), c.Records, c.TornTails)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir, NoListen: true}); !errors.Is(err, broker.ErrStoreDamaged) {
			if srv != nil {
				srv.Shutdown()
			}
			t.Errorf("bit %#x: a damaged store started a server: %v", bit, err)
		}
		srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir, NoListen: true, SharedStoreLock: true, ScrubDamaged: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := streamMsgs(t, srv); got != 39 {
			t.Errorf("bit %#x: the scrubbed store holds %d messages, want 39", bit, got)
		}
		srv.Shutdown()
		cancel()
	}
}

// A damaged subject length that moves the boundary between subject and
// message passes the checksum, which runs over both as one stream of
// bytes. The server then sent a subject holding message bytes, a space
// among them, and the client's protocol broke: its reader reconnected and
// asked for the same record again, for ever (audit verify hung 9 minutes
// in TestAuditVerify). The check now finds the record damaged, and a
// reader of the scrubbed store reads the rest to the end.
func TestDamagedSubjectLength(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 50
	dir, blk := storeOf(t, n, false)
	b, _ := os.ReadFile(blk)
	// Subject length 3 becomes 11: "t.0message " and its space.
	b[recordAt(t, b, 20)+20] ^= 0x08
	if err := os.WriteFile(blk, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := broker.CheckStore(dir)
	if err != nil || len(c.Damaged) != 1 || c.Records != n-1 {
		t.Fatalf("check: %v, %d damaged, %d intact: %+v", err, len(c.Damaged), c.Records, c.Damaged)
	}
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir, NoListen: true, SharedStoreLock: true, ScrubDamaged: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect("", nats.InProcessServer(srv.InProcess()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	cons, err := js.OrderedConsumer(ctx, "ASYREVEL_t", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for got := 0; got < n-1; got++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", got, n-1, err)
		}
		if m.Subject() != "t.0" {
			t.Fatalf("message %d on %q", got, m.Subject())
		}
	}
}
