package party

// outbox keeps copies of the last messages published, for a resume that
// finds them missing from the stream: a broker that acknowledged them
// (asynchronous persistence) and died before writing them loses the tail
// of what it confirmed. Keeping a message copies it into a buffer of the
// ring: no allocation once the buffers have grown.
type outbox struct {
	sent []Sent
	next int
}

// Sent is a message published, as kept in checkpoints.
type Sent struct {
	Seq     uint64
	Subject string
	Data    []byte
}

// outboxSize is how many of the last requests are kept (a party keeps
// its requests only: evaluation chunks are large, and one lost costs an
// evaluation round a timeout, not the run).
const outboxSize = 64

func (o *outbox) keep(seq uint64, subject string, data []byte) {
	if o.sent == nil {
		// Every buffer at once, with room to spare: the hot loop then
		// copies without allocating (a larger message grows its slot once).
		o.sent = make([]Sent, outboxSize)
		c := max(2*len(data), 1024)
		buf := make([]byte, outboxSize*c)
		for i := range o.sent {
			o.sent[i].Data = buf[i*c : i*c : (i+1)*c]
		}
	}
	s := &o.sent[o.next%len(o.sent)]
	s.Seq, s.Subject, s.Data = seq, subject, append(s.Data[:0], data...)
	o.next++
}

// snapshot copies the kept messages with sequence numbers above after
// into dst, oldest first.
func (o *outbox) snapshot(dst []Sent) []Sent {
	dst = dst[:0]
	n := len(o.sent)
	for i := range n {
		s := o.sent[(o.next+i)%max(n, 1)]
		if s.Seq > 0 {
			dst = append(dst, Sent{Seq: s.Seq, Subject: s.Subject, Data: append([]byte(nil), s.Data...)})
		}
	}
	return dst
}
