package replay

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/asyrevel/asyrevel/schemas"
)

// TranscriptHeader is the header row of a party's transcript CSV.
var TranscriptHeader = []string{"stream_seq", "time", "kind", "sender", "seq", "req_seq", "sample_ids", "values", "staleness"}

// TranscriptOptions chooses what WriteTranscripts writes.
type TranscriptOptions struct {
	// Dir receives party-M.csv for every party and summary.json.
	Dir string
	// EvalValues writes the outputs of evaluation messages too (every
	// evaluation round repeats the whole training and test sets: large).
	// Without it an eval row gives the split, round and sample range.
	EvalValues bool
	// Progress, if set, is called every ProgressEvery records.
	Progress      func(records uint64)
	ProgressEvery uint64
}

// Summary is what WriteTranscripts learnt from the log.
type Summary struct {
	Stream      Info             `json:"stream"`
	Records     uint64           `json:"records"`
	FromSeq     uint64           `json:"from_seq"`
	ToSeq       uint64           `json:"to_seq"`
	FromTime    time.Time        `json:"from_time"`
	ToTime      time.Time        `json:"to_time"`
	ByKind      map[string]int64 `json:"by_kind"`
	Undecodable map[string]int64 `json:"undecodable"` // by reason
	Parties     []PartySummary   `json:"parties"`
	ReadSeconds float64          `json:"read_seconds"`
	RecordsPerS float64          `json:"records_per_second"`
}

// PartySummary is one party's share of the log.
type PartySummary struct {
	Party          int     `json:"party"`
	Requests       int64   `json:"requests"`
	Replies        int64   `json:"replies"`
	Unanswered     int64   `json:"unanswered"` // requests without a reply in the log read
	SampleVisits   int64   `json:"sample_visits"`
	SamplesCovered int     `json:"samples_covered"` // distinct sample ids in its requests
	Evals          int64   `json:"eval_outputs"`
	BytesUp        int64   `json:"bytes_up"`
	BytesDown      int64   `json:"bytes_down"`
	MaxStaleness   uint32  `json:"max_staleness"`
	MeanStaleness  float64 `json:"mean_staleness"`
	ReplyFormat    string  `json:"reply_format"` // "h,h_bar", "delta", "mean" or "" (no reply)
}

type partyState struct {
	w       *bufio.Writer
	f       *os.File
	sum     PartySummary
	pending map[uint64][]uint32 // request seq -> ids, until its reply
	seen    []uint64            // bitset of the sample ids requested
	stSum   float64
	k       int // outputs per sample (from the hello; 1 until then)
}

// WriteTranscripts reads l with ropts and writes, into topts.Dir, one CSV
// per party of what that party sent and received (its hello, requests,
// replies, evaluation outputs, and every control message), in stream
// order, and summary.json. A reply's row lists the sample ids of the
// request it answers (the party knows them).
func WriteTranscripts(ctx context.Context, l *Log, ropts ReadOptions, topts TranscriptOptions) (*Summary, error) {
	if err := os.MkdirAll(topts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("replay: output folder: %w", err)
	}
	r, err := l.Read(ctx, ropts)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	s := &Summary{Stream: l.Info(), ByKind: map[string]int64{}, Undecodable: map[string]int64{}}
	parties := map[int]*partyState{}
	var ctlRows [][]byte // control rows before a party's first message
	open := func(m int) (*partyState, error) {
		if p, ok := parties[m]; ok {
			return p, nil
		}
		f, err := os.Create(filepath.Join(topts.Dir, "party-"+strconv.Itoa(m)+".csv"))
		if err != nil {
			return nil, fmt.Errorf("replay: transcript: %w", err)
		}
		p := &partyState{f: f, w: bufio.NewWriterSize(f, 1<<20), pending: map[uint64][]uint32{}, k: 1}
		p.sum.Party = m
		for i, h := range TranscriptHeader {
			if i > 0 {
				p.w.WriteByte(',')
			}
			p.w.WriteString(h)
		}
		p.w.WriteByte('\n')
		for _, row := range ctlRows {
			p.w.Write(row)
		}
		parties[m] = p
		return p, nil
	}
	defer func() {
		for _, p := range parties {
			p.f.Close()
		}
	}()
	every := topts.ProgressEvery
	if every == 0 {
		every = 1 << 20
	}
	t0 := time.Now()
	var row []byte
	for {
		rec, err := r.Next(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		if s.Records == 0 {
			s.FromSeq, s.FromTime = rec.Seq, rec.Time
		}
		s.Records++
		s.ToSeq, s.ToTime = rec.Seq, rec.Time
		if topts.Progress != nil && s.Records%every == 0 {
			topts.Progress(s.Records)
		}
		if rec.Receipt {
			s.ByKind["rcpt"]++
			continue
		}
		if rec.Err != nil {
			s.Undecodable[schemas.Reason(rec.Err)]++
			continue
		}
		s.ByKind[rec.Kind.String()]++
		if rec.Msg == nil {
			continue
		}
		row = row[:0]
		if rec.Kind == schemas.KindControl {
			row = appendRow(row, rec, nil, 1, topts.EvalValues)
			for _, p := range parties {
				p.w.Write(row)
			}
			ctlRows = append(ctlRows, slices.Clone(row))
			continue
		}
		p, err := open(rec.Party)
		if err != nil {
			return nil, err
		}
		var ids []uint32
		switch m := rec.Msg.(type) {
		case *schemas.PartyOutput:
			p.sum.Requests++
			p.sum.BytesUp += int64(len(rec.Data))
			p.sum.SampleVisits += int64(len(m.IDs))
			p.pending[m.Seq] = slices.Clone(m.IDs)
			for _, id := range m.IDs {
				w := int(id >> 6)
				if w >= len(p.seen) {
					p.seen = slices.Grow(p.seen, w+1-len(p.seen))[:w+1]
				}
				if p.seen[w]&(1<<(id&63)) == 0 {
					p.seen[w] |= 1 << (id & 63)
					p.sum.SamplesCovered++
				}
			}
		case *schemas.Reply:
			p.sum.Replies++
			p.sum.BytesDown += int64(len(rec.Data))
			ids = p.pending[m.ReqSeq]
			delete(p.pending, m.ReqSeq)
			p.sum.MaxStaleness = max(p.sum.MaxStaleness, m.Staleness)
			p.stSum += float64(m.Staleness)
			p.sum.ReplyFormat = ReplyFormat(m)
		case *schemas.EvalOutput:
			p.sum.Evals++
			p.sum.BytesUp += int64(len(rec.Data))
		case *schemas.Hello:
			p.sum.BytesUp += int64(len(rec.Data))
			p.k = max(1, int(m.OutDim))
		}
		row = appendRow(row, rec, ids, p.k, topts.EvalValues)
		if _, err := p.w.Write(row); err != nil {
			return nil, fmt.Errorf("replay: transcript: %w", err)
		}
	}
	s.ReadSeconds = time.Since(t0).Seconds()
	if s.ReadSeconds > 0 {
		s.RecordsPerS = float64(s.Records) / s.ReadSeconds
	}
	for _, p := range parties {
		if err := p.w.Flush(); err != nil {
			return nil, fmt.Errorf("replay: transcript: %w", err)
		}
		if err := p.f.Close(); err != nil {
			return nil, fmt.Errorf("replay: transcript: %w", err)
		}
		p.sum.Unanswered = int64(len(p.pending))
		if p.sum.Replies > 0 {
			p.sum.MeanStaleness = p.stSum / float64(p.sum.Replies)
		}
		s.Parties = append(s.Parties, p.sum)
	}
	slices.SortFunc(s.Parties, func(a, b PartySummary) int { return a.Party - b.Party })
	js, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(topts.Dir, "summary.json"), append(js, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("replay: summary: %w", err)
	}
	return s, nil
}

// ReplyFormat names how a reply carries its losses: "h,h_bar" (the
// paper's), "delta" (h_bar - h per sample) or "mean" (the batch mean of
// h_bar - h).
func ReplyFormat(m *schemas.Reply) string {
	switch {
	case m.Mean:
		return "mean"
	case len(m.Delta) > 0:
		return "delta"
	}
	return "h,h_bar"
}

// appendRow appends rec's transcript row (ids: the sample ids a reply
// answers; k: the sender's outputs per sample).
func appendRow(b []byte, rec *Record, ids []uint32, k int, evalValues bool) []byte {
	b = strconv.AppendUint(b, rec.Seq, 10)
	b = append(b, ',')
	b = rec.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, ',')
	b = append(b, rec.Kind.String()...)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(rec.Sender), 10)
	b = append(b, ',')
	h := rec.Msg.Head()
	b = strconv.AppendUint(b, h.Seq, 10)
	b = append(b, ',')
	var stale string
	switch m := rec.Msg.(type) {
	case *schemas.Hello:
		b = append(b, ",,"...)
		b = fmt.Appendf(b, "model=%s;d=%d;k=%d;n_train=%d;n_test=%d", m.Model, m.InDim, m.OutDim, m.NTrain, m.NTest)
	case *schemas.PartyOutput:
		b = append(b, ',')
		b = appendIDs(b, m.IDs)
		b = append(b, ',')
		b = appendFloats(append(b, "c="...), m.C)
		b = appendFloats(append(b, ";c_hat="...), m.CHat)
	case *schemas.Reply:
		b = strconv.AppendUint(b, m.ReqSeq, 10)
		b = append(b, ',')
		b = appendIDs(b, ids)
		b = append(b, ',')
		switch {
		case m.Mean:
			b = appendFloats(append(b, "mean_delta="...), m.Delta)
		case len(m.Delta) > 0:
			b = appendFloats(append(b, "delta="...), m.Delta)
		default:
			b = appendFloats(append(b, "h="...), m.H)
			b = appendFloats(append(b, ";h_bar="...), m.HBar)
		}
		stale = strconv.FormatUint(uint64(m.Staleness), 10)
	case *schemas.EvalOutput:
		b = append(b, ',')
		if n := len(m.C) / k; n > 0 {
			b = fmt.Appendf(b, "%d..%d", m.First, int(m.First)+n-1)
		}
		b = append(b, ',')
		b = fmt.Appendf(b, "split=%s;round=%d;first=%d;total=%d;values=%d", m.Split, m.Round, m.First, m.Total, len(m.C))
		if evalValues {
			b = appendFloats(append(b, ";c="...), m.C)
		}
	case *schemas.Control:
		b = append(b, ",,"...)
		b = fmt.Appendf(b, "op=%s;round=%d;splits=%d", m.Op, m.Round, m.Splits)
		if m.Reason != "" {
			b = append(b, ";reason="...)
			for _, r := range m.Reason {
				if r == ',' || r == '"' || r == '\n' || r == '\r' {
					r = ' '
				}
				b = append(b, string(r)...)
			}
		}
	}
	b = append(b, ',')
	b = append(b, stale...)
	return append(b, '\n')
}

func appendIDs(b []byte, ids []uint32) []byte {
	for i, id := range ids {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendUint(b, uint64(id), 10)
	}
	return b
}

func appendFloats(b []byte, x []float64) []byte {
	for i, v := range x {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendFloat(b, v, 'g', -1, 64)
	}
	return b
}
