package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// ReadReceiptTree reads the receipts of dir and of its subfolders (one
// level: OUT/receipts/party-m).
func ReadReceiptTree(dir string) ([]*trust.Receipt, error) {
	rs, err := trust.ReadReceipts(dir)
	if err != nil {
		return nil, fmt.Errorf("--receipts %s: %w", dir, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if e.IsDir() {
			sub, err := trust.ReadReceipts(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, fmt.Errorf("--receipts %s: %w", filepath.Join(dir, e.Name()), err)
			}
			rs = append(rs, sub...)
		}
	}
	return rs, nil
}

// CheckOut audits run's log in the output folder out of a run with the
// trust layer (train --out: out/stream, out/keys/roster.json,
// out/receipts), as asyrevel audit verify --store out/stream does.
func CheckOut(ctx context.Context, out, run string) (*trust.AuditReport, error) {
	roster, err := trust.ReadRoster(filepath.Join(out, "keys", "roster.json"))
	if err != nil {
		return nil, err
	}
	receipts, err := ReadReceiptTree(filepath.Join(out, "receipts"))
	if err != nil {
		return nil, err
	}
	lg, err := replay.Open(ctx, replay.Source{Store: filepath.Join(out, "stream"), Run: run})
	if err != nil {
		return nil, err
	}
	defer lg.Close()
	return Check(ctx, func(fn func(*replay.Record)) error { return Each(ctx, lg, fn) }, roster, receipts)
}

// Check checks a run's log (each calls its function for every record,
// in stream order) against the roster: a first pass collects the
// checkpoints (seal controls) and receipts the log holds, a second gives
// the auditor every message in stream order.
//
// damage lists records of the store's files that failed the store's own
// checksum and were left out of what each reads (replay.Log.Damage):
// each is a problem against the verdict.
func Check(ctx context.Context, each func(func(*replay.Record)) error, roster *trust.Roster, receipts []*trust.Receipt, damage ...broker.DamagedRecord) (*trust.AuditReport, error) {
	// As the receivers judged: a rogue's refused messages are listed, not
	// held against the log.
	a, err := trust.NewAuditor(roster, trust.AuditOptions{AsReceiver: true, AnchorReceipts: true})
	if err != nil {
		return nil, err
	}
	for i, rc := range receipts {
		// A receipt that does not verify is reported by the auditor.
		_ = a.AddReceipt(rc, fmt.Sprintf("receipt file %d (%s, checkpoint %d)", i+1, rc.Party, rc.Checkpoint.Number))
	}
	var evidence []func()
	err = each(func(rec *replay.Record) {
		if c := rec.Control(); c != nil && c.Op == schemas.CtlSeal {
			if cp, err := trust.DecodeCheckpointHeader(HeaderValue(rec, trust.CheckpointHeader)); err == nil {
				src := fmt.Sprintf("checkpoint %d in the log (stream seq %d)", cp.Number, rec.Seq)
				evidence = append(evidence, func() { _ = a.AddLogCheckpoint(cp, src) })
			}
		}
		if roster.SubjectKind(rec.Subject) == "rcpt" {
			if _, rc, err := trust.ParseReceiptMessage(rec.Data); err == nil {
				src := fmt.Sprintf("receipt of %s in the log (stream seq %d)", rc.Party, rec.Seq)
				evidence = append(evidence, func() { _ = a.AddLogReceipt(rc, src) })
			}
		}
	})
	if err != nil {
		return nil, err
	}
	for _, f := range evidence {
		f()
	}
	err = each(func(rec *replay.Record) {
		m := trust.Msg{StreamSeq: rec.Seq, Subject: rec.Subject, Payload: rec.Data,
			Sig: HeaderValue(rec, trust.SigHeader), Prev: HeaderValue(rec, trust.PrevHeader)}
		switch {
		case rec.Msg != nil:
			m.Seq = rec.Msg.Head().Seq
			// Causal links: a reply names the request it answers.
			if rec.Kind == schemas.KindOutput {
				m.ID = schemas.RequestDigest(nil, rec.Data)
			} else if r := rec.Reply(); r != nil && len(r.Cause) > 0 {
				m.Cites = r.Cause
			}
		case roster.SubjectKind(rec.Subject) == "rcpt":
			m.Seq, _, _ = trust.ParseReceiptMessage(rec.Data)
		case roster.SubjectKind(rec.Subject) == schemas.AlignToken || roster.SubjectKind(rec.Subject) == schemas.AlignHubToken:
			m.Seq = schemas.AlignSeqHead(rec.Data) // private entity alignment
		case roster.SubjectKind(rec.Subject) == trust.ScoreToken || roster.SubjectKind(rec.Subject) == trust.ScoredToken:
			m.Seq = schemas.ScoreSeq(rec.Data) // scoring with the saved models
		}
		a.Add(&m)
	})
	if err != nil {
		return nil, err
	}
	for _, d := range damage {
		a.AddStoreDamage(d.String() + "; the record was left out of what was read")
	}
	return a.Finish(), nil
}

// Each calls f for every record of the log, in stream order.
func Each(ctx context.Context, log *replay.Log, f func(*replay.Record)) error {
	rd, err := log.Read(ctx, replay.ReadOptions{})
	if err != nil {
		return err
	}
	defer rd.Close()
	for {
		rec, err := rd.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		f(rec)
	}
}

// HeaderValue is the first value of a record's header key ("" if none).
func HeaderValue(rec *replay.Record, key string) string {
	if v := rec.Header[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
