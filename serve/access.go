package serve

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// AccessLog records who asked the service for which ids: one JSON line a
// request (time, client, remote address, method, path, status, the
// number of ids and each id's keyed hash, milliseconds, and for a refusal
// its reason). Ids are hashed with HMAC-SHA-256 under a secret key of the
// operator's (access.key), truncated to 128 bits: whoever holds the key
// can find every request for a given id (HashID), whoever holds only the
// log cannot test guessed ids against it. A token is never written. Safe
// for concurrent use.
type AccessLog struct {
	key    []byte
	mu     sync.Mutex
	w      *bufio.Writer
	closer io.Closer
	mac    hash.Hash
	sum    []byte
	line   []byte
	err    error
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once
	cerr   error
}

// AccessEntry is one line of the access log.
type AccessEntry struct {
	Time   time.Time `json:"time"`
	Client string    `json:"client"` // the client's name; "-" when unknown
	Remote string    `json:"remote"`
	Method string    `json:"method"`
	Path   string    `json:"path"`
	Status int       `json:"status"`
	// IDs is the number of ids asked for, IDHashes their keyed hashes in
	// the request's order.
	IDs      int      `json:"ids,omitempty"`
	IDHashes []string `json:"id_hashes,omitempty"`
	Millis   float64  `json:"ms"`
	Reason   string   `json:"reason,omitempty"` // why a request was refused
}

// NewAccessLog writes the access log to w, ids hashed under key (32
// bytes), flushed every 200 ms and on Close; closer, if set, is closed
// with it.
func NewAccessLog(w io.Writer, closer io.Closer, key []byte) (*AccessLog, error) {
	if len(key) < 16 {
		return nil, errors.New("serve: the access log's key is shorter than 16 bytes")
	}
	l := &AccessLog{key: key, w: bufio.NewWriterSize(w, 64<<10), closer: closer, mac: hmac.New(sha256.New, key),
		stop: make(chan struct{}), done: make(chan struct{})}
	go l.flusher()
	return l, nil
}

// OpenAccessLog appends the access log to the file at path (mode 0600;
// "-" is stderr).
func OpenAccessLog(path string, key []byte) (*AccessLog, error) {
	if path == "-" {
		return NewAccessLog(os.Stderr, nil, key)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return NewAccessLog(f, f, key)
}

// HashID is id as the access log writes it: hex of the first 16 bytes of
// HMAC-SHA-256(key, id).
func HashID(key []byte, id string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

func (l *AccessLog) flusher() {
	defer close(l.done)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.mu.Lock()
			if err := l.w.Flush(); err != nil && l.err == nil {
				l.err = err
			}
			l.mu.Unlock()
		}
	}
}

// Record writes one entry; ids (may be nil) are hashed into it (its IDs
// and IDHashes are set from them). The line is appended by hand, without
// reflection: it is written once a request.
func (l *AccessLog) Record(e AccessEntry, ids []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := append(l.line[:0], `{"time":"`...)
	b = e.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","client":`...)
	b = appendJSONString(b, e.Client)
	b = append(b, `,"remote":`...)
	b = appendJSONString(b, e.Remote)
	b = append(b, `,"method":`...)
	b = appendJSONString(b, e.Method)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, e.Path)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	if len(ids) > 0 {
		b = append(b, `,"ids":`...)
		b = strconv.AppendInt(b, int64(len(ids)), 10)
		b = append(b, `,"id_hashes":[`...)
		for i, id := range ids {
			if i > 0 {
				b = append(b, ',')
			}
			l.mac.Reset()
			l.mac.Write([]byte(id))
			l.sum = l.mac.Sum(l.sum[:0])
			b = append(b, '"')
			b = hex.AppendEncode(b, l.sum[:16])
			b = append(b, '"')
		}
		b = append(b, ']')
	}
	b = append(b, `,"ms":`...)
	b = strconv.AppendFloat(b, e.Millis, 'f', -1, 64)
	if e.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, e.Reason)
	}
	b = append(b, "}\n"...)
	l.line = b
	if _, err := l.w.Write(b); err != nil && l.err == nil {
		l.err = err
	}
}

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// Err is the first error of writing the log, if any.
func (l *AccessLog) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Close flushes the log and closes its file; later calls return the
// first's result.
func (l *AccessLog) Close() error {
	l.closed.Do(func() {
		close(l.stop)
		<-l.done
		l.mu.Lock()
		defer l.mu.Unlock()
		err := l.w.Flush()
		if l.closer != nil {
			if cerr := l.closer.Close(); err == nil {
				err = cerr
			}
		}
		if l.err != nil {
			err = l.err
		}
		l.cerr = err
	})
	return l.cerr
}
