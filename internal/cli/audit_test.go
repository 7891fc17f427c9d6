package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/asyrevel/asyrevel/audit"
	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// auditRun trains a small run with --out and returns the folder.
func auditRun(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	code, _, errOut := runCLI(t, "train", "--data", "synthetic:n=1500,d=12,test=300", "--parties", "2", "--epochs", "2",
		"--batch", "8", "--out", out, "--log", "warn", "--privacy", labelled)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, errOut)
	}
	return out
}

// records reads a stopped run's whole log into memory.
func records(t *testing.T, store string) []*replay.Record {
	t.Helper()
	ctx := context.Background()
	st, err := os.ReadDir(filepath.Join(store, "jetstream", "$G", "streams"))
	if err != nil || len(st) != 1 {
		t.Fatalf("store %s: %v %v", store, st, err)
	}
	log, err := replay.Open(ctx, replay.Source{Store: store, Run: strings.TrimPrefix(st[0].Name(), "ASYREVEL_")})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	var recs []*replay.Record
	if err := audit.Each(ctx, log, func(r *replay.Record) { recs = append(recs, r.Clone()) }); err != nil {
		t.Fatal(err)
	}
	return recs
}

// The audit of an intact run passes; each kind of tampering with the
// log is detected: a changed byte, a cut tail (against the parties'
// receipts), a removed message, two swapped messages, a message re-signed
// with another participant's key.
func TestAuditVerify(t *testing.T) {
	t.Parallel()
	out := auditRun(t)
	store := filepath.Join(out, "stream")
	code, stdout, errOut := runCLI(t, "audit", "verify", "--store", store)
	if code != 0 || !strings.Contains(stdout, "verdict: intact") {
		t.Fatalf("intact run: exit %d: %s %s", code, stdout, errOut)
	}
	roster, err := trust.ReadRoster(filepath.Join(out, "keys", "roster.json"))
	if err != nil {
		t.Fatal(err)
	}
	receipts, err := audit.ReadReceiptTree(filepath.Join(out, "receipts"))
	if err != nil || len(receipts) != 2 {
		t.Fatalf("%d receipts: %v", len(receipts), err)
	}
	party2, err := trust.ReadKeyFile(filepath.Join(out, "keys", "party-2.nk"))
	if err != nil {
		t.Fatal(err)
	}
	orig := records(t, store)
	// find returns the index of the n-th record on a subject of kind.
	find := func(recs []*replay.Record, kind string, party, n int) int {
		for i, r := range recs {
			if roster.SubjectKind(r.Subject) == kind && (party == 0 || strings.HasSuffix(r.Subject, "."+string(rune('0'+party)))) {
				if n--; n == 0 {
					return i
				}
			}
		}
		t.Fatalf("no record %d of %s %d", n, kind, party)
		return -1
	}
	clone := func() []*replay.Record {
		c := make([]*replay.Record, len(orig))
		for i, r := range orig {
			c[i] = r.Clone()
		}
		return c
	}
	for _, tc := range []struct {
		name   string
		tamper func([]*replay.Record) []*replay.Record
		want   trust.ProblemKind // or any of also (among the problems or the receivers' rejections)
		also   []trust.ProblemKind
	}{
		{"intact", func(r []*replay.Record) []*replay.Record { return r }, "", nil},
		{"a byte changed", func(r []*replay.Record) []*replay.Record {
			i := find(r, "reply", 1, 5)
			r[i].Data[len(r[i].Data)-3] ^= 0x40
			return r
		}, trust.ProblemBrokenChain, []trust.ProblemKind{trust.ProblemRewritten}},
		{"the tail cut", func(r []*replay.Record) []*replay.Record { return r[:len(r)-len(r)/5] }, trust.ProblemTruncated, nil},
		{"a message removed", func(r []*replay.Record) []*replay.Record {
			return slices.Delete(r, find(r, "out", 2, 7), find(r, "out", 2, 7)+1)
		}, trust.ProblemStreamGap, nil},
		{"two messages swapped", func(r []*replay.Record) []*replay.Record {
			i, j := find(r, "out", 1, 3), find(r, "out", 1, 4)
			r[i].Subject, r[j].Subject = r[j].Subject, r[i].Subject
			r[i].Data, r[j].Data = r[j].Data, r[i].Data
			r[i].Header, r[j].Header = r[j].Header, r[i].Header
			r[i].Msg, r[j].Msg = r[j].Msg, r[i].Msg
			return r
		}, trust.ProblemReorder, []trust.ProblemKind{"gap", trust.ProblemUnsealedTail}},
		{"a reply moved before its request", func(r []*replay.Record) []*replay.Record {
			// A reply moves to just before the request it answers; the
			// messages between them (none on either's subject) move one
			// place on, as a store rewritten so would number them.
			for i := len(r) / 2; i < len(r); i++ {
				rep := r[i].Reply()
				if rep == nil {
					continue
				}
				j := i - 1
				for ; j > 0 && r[j].Subject != r[i].Subject; j-- {
					if r[j].Kind == schemas.KindOutput && bytes.Equal(schemas.RequestDigest(nil, r[j].Data), rep.Cause) {
						break
					}
				}
				if j <= 0 || r[j].Subject == r[i].Subject {
					continue
				}
				moved := r[i]
				for k := i; k > j; k-- {
					r[k] = r[k-1]
					r[k].Seq++
				}
				moved.Seq = r[j].Seq - 1
				r[j] = moved
				return r
			}
			t.Fatal("no reply to move")
			return nil
		}, trust.ProblemCausal, nil},
		{"the last seal and the receipts after it dropped", func(r []*replay.Record) []*replay.Record {
			last := -1
			for i, rec := range r {
				if c := rec.Control(); c != nil && c.Op == schemas.CtlSeal {
					last = i
				}
			}
			if last < 0 {
				t.Fatal("no seal in the log")
			}
			return slices.DeleteFunc(r[:last], func(*replay.Record) bool { return false })
		}, trust.ProblemTruncated, nil},
		{"an unsigned message on a subject that is not the run's", func(r []*replay.Record) []*replay.Record {
			x := r[len(r)/2].Clone()
			x.Subject = "asyrevel." + roster.Run + ".junk"
			x.Header = nil
			x.Msg, x.Kind = nil, 0
			x.Seq = r[len(r)-1].Seq + 1
			return append(r, x)
		}, "", nil},
		// A pull relay: a party asks for its own consumer's next messages
		// with a reply subject inside the run, and the stream stores the
		// copies the server delivers there. Listed apart, never against an
		// honest log's verdict.
		{"relayed copies of genuine signed messages on their own subject", func(r []*replay.Record) []*replay.Record {
			for _, i := range []int{find(r, "join", 1, 1), find(r, "out", 1, 3), find(r, "reply", 1, 2)} {
				x := r[i].Clone()
				x.Seq = r[len(r)-1].Seq + 1
				r = append(r, x)
			}
			return r
		}, "", nil},
		{"relayed copies of genuine messages onto other subjects of the run", func(r []*replay.Record) []*replay.Record {
			ctl := r[find(r, "ctl", 0, 1)].Subject
			for _, i := range []int{find(r, "reply", 1, 2), find(r, "out", 2, 1)} {
				x := r[i].Clone()
				x.Subject = ctl
				x.Seq = r[len(r)-1].Seq + 1
				r = append(r, x)
			}
			return r
		}, "", nil},
		{"re-signed with another key", func(r []*replay.Record) []*replay.Record {
			i := find(r, "join", 1, 1)
			sig, err := trust.ParseSignature(r[i].Header.Get(trust.SigHeader))
			if err != nil {
				t.Fatal(err)
			}
			forged := trust.SignHead(party2, "party-2", roster.Run, r[i].Subject, 1, sig.Head)
			r[i].Header[trust.SigHeader] = []string{forged.Header()}
			return r
		}, trust.ProblemWrongSigner, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs := tc.tamper(clone())
			rep, err := audit.Check(context.Background(), func(f func(*replay.Record)) error {
				for _, r := range recs {
					f(r)
				}
				return nil
			}, roster, receipts)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if !rep.Intact() || (strings.Contains(tc.name, "not the run's") && rep.Foreign != 1) {
					t.Fatalf("intact log reported: %v", rep.Problems)
				}
				if strings.HasPrefix(tc.name, "relayed") {
					// Listed apart: what a receiver would have refused.
					var apart uint64
					for _, n := range rep.Rejected {
						apart += n
					}
					if apart+uint64(rep.Foreign) < 2 {
						t.Fatalf("the relayed copies are not listed apart: rejected %v, foreign %d", rep.Rejected, rep.Foreign)
					}
				}
				return
			}
			found := false
			for _, k := range append(tc.also, tc.want) {
				found = found || rep.Counts[string(k)] > 0 || rep.Rejected[string(k)] > 0
			}
			if rep.Intact() || !found {
				t.Fatalf("%s not detected: intact %v, problems %v, rejected %v", tc.want, rep.Intact(), rep.Counts, rep.Rejected)
			}
		})
	}
	// A byte changed inside the store's message files: the broker drops
	// the damaged record (its own checksum) and the audit finds the hole.
	blks, _ := filepath.Glob(filepath.Join(store, "jetstream", "$G", "streams", "*", "msgs", "*.blk"))
	if len(blks) == 0 {
		t.Fatal("no message block in the store")
	}
	b, err := os.ReadFile(blks[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(blks[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, errOut = runCLI(t, "audit", "verify", "--store", store)
	if code != 1 || !strings.Contains(stdout, "verdict: NOT intact") || !strings.Contains(stdout, "store_damage") {
		t.Fatalf("a byte changed in the store: exit %d: %s %s", code, stdout, errOut)
	}
	// The store's own check names the record; repair copies the rest.
	if code, stdout, _ = runCLI(t, "store", "check", store); code != 1 || !strings.Contains(stdout, "1 damaged") {
		t.Fatalf("store check: exit %d: %s", code, stdout)
	}
	fixed := filepath.Join(t.TempDir(), "fixed")
	if code, stdout, errOut = runCLI(t, "store", "repair", store, fixed); code != 0 {
		t.Fatalf("store repair: exit %d: %s %s", code, stdout, errOut)
	}
	if code, stdout, _ = runCLI(t, "store", "check", fixed); code != 0 || !strings.Contains(stdout, "0 damaged") {
		t.Fatalf("store check of the repaired copy: exit %d: %s", code, stdout)
	}
}

// A second run into the same --out keeps both runs' receipts, each under
// its run's name, and the audit of the new run is intact (it used to
// refuse the new receipts, "file exists", and fail on the old ones).
func TestAuditSecondRunSameOut(t *testing.T) {
	t.Parallel()
	out := auditRun(t)
	first, err := trust.ReadRoster(filepath.Join(out, "keys", "roster.json"))
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI(t, "train", "--data", "synthetic:n=1500,d=12,test=300", "--parties", "2", "--epochs", "2",
		"--batch", "8", "--out", out, "--log", "warn", "--privacy", labelled)
	if code != 0 {
		t.Fatalf("second train: exit %d: %s", code, errOut)
	}
	second, err := trust.ReadRoster(filepath.Join(out, "keys", "roster.json"))
	if err != nil || second.Run == first.Run {
		t.Fatalf("second roster: %v, runs %s %s", err, first.Run, second.Run)
	}
	if strings.Contains(errOut, "file exists") || strings.Contains(errOut, "ERR") {
		t.Errorf("second run: %s", errOut)
	}
	code, stdout, errOut := runCLI(t, "audit", "verify", "--store", filepath.Join(out, "stream"), "--run", second.Run)
	if code != 0 || !strings.Contains(stdout, "verdict: intact") {
		t.Fatalf("second run's audit: exit %d: %s %s", code, stdout, errOut)
	}
	if !strings.Contains(stdout, "4 receipts") && !strings.Contains(stdout, "receipts verified") {
		t.Logf("audit: %s", stdout)
	}
}
