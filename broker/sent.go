package broker

import "maps"

// SentRing keeps copies of the last messages a participant published, for
// a resume that finds them missing from the stream: a broker that
// acknowledged them (asynchronous persistence) and died before writing
// them loses the tail of what it confirmed. Keeping a message copies it
// into a buffer of the ring: no allocation once the buffers have grown.
// The zero SentRing keeps nothing until Size is set.
type SentRing struct {
	Size int // how many of the last messages are kept
	// Floor is a stream position known to lie below whatever is
	// published next (the stream's message count seen before it, say):
	// each message kept records it (Sent.Floor), so that a resume can
	// read the stream from below the oldest message kept.
	Floor uint64
	sent  []Sent
	next  int
}

// Sent is a message published, as kept in checkpoints.
type Sent struct {
	Seq     uint64
	Subject string
	Data    []byte
	Floor   uint64 // SentRing.Floor when it was kept: its stream sequence is above it (0: not known)
	// Header is the message's header when it had one (a signed
	// message's signature and chain link): sent again, the message must
	// carry it, or its receivers reject it as unsigned.
	Header map[string]string
}

// Keep copies the message with sequence number seq, and its header if it
// has one, into the ring, over the oldest one.
func (o *SentRing) Keep(seq uint64, subject string, data []byte, hdr map[string]string) {
	if o.Size <= 0 {
		return
	}
	if o.sent == nil {
		// Every buffer at once, with room to spare: the hot loop then
		// copies without allocating (a larger message grows its slot once).
		o.sent = make([]Sent, o.Size)
		c := max(2*len(data), 1024)
		buf := make([]byte, o.Size*c)
		for i := range o.sent {
			o.sent[i].Data = buf[i*c : i*c : (i+1)*c]
		}
	}
	s := &o.sent[o.next%len(o.sent)]
	s.Seq, s.Subject, s.Data, s.Floor = seq, subject, append(s.Data[:0], data...), o.Floor
	s.Header = nil
	if len(hdr) > 0 {
		s.Header = maps.Clone(hdr) // signed messages only: one in many
	}
	o.next++
}

// Snapshot copies the kept messages into dst, oldest first.
func (o *SentRing) Snapshot(dst []Sent) []Sent {
	dst = dst[:0]
	n := len(o.sent)
	for i := range n {
		s := o.sent[(o.next+i)%n]
		if s.Seq > 0 {
			dst = append(dst, Sent{Seq: s.Seq, Subject: s.Subject, Data: append([]byte(nil), s.Data...), Floor: s.Floor, Header: maps.Clone(s.Header)})
		}
	}
	return dst
}
