package trust

import (
	"unsafe"

	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/schemas"
)

// loop runs f b.N times and reports, besides the wall time, the process
// CPU time per op (cpu-ns/op).
func loop(b *testing.B, f func()) {
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		f()
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// Payload sizes of a PartyOutput at batch 1 and about batch 64.
var benchSizes = []int{66, 2300}

func BenchmarkChainAppend(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			c := NewChain("bench", "asyrevel.bench.out.1")
			pl := payload(1, n)
			b.SetBytes(int64(n))
			loop(b, func() { c.Append(pl) })
		})
	}
}

func BenchmarkSign(b *testing.B) {
	k := testKeys(b, 1)[0]
	msg := SignedMessage(nil, "bench", "asyrevel.bench.out.1", 12345, Hash{1})
	loop(b, func() { k.Sign(msg) })
}

func BenchmarkVerifySignature(b *testing.B) {
	k := testKeys(b, 1)[0]
	pub, _ := ParsePublicKey(k.PublicKey())
	msg := SignedMessage(nil, "bench", "asyrevel.bench.out.1", 12345, Hash{1})
	sig := k.Sign(msg)
	loop(b, func() {
		if !ed25519.Verify(pub, msg, sig[:]) {
			b.Fatal("verify")
		}
	})
}

// BenchmarkPublisher is the sender's cost per message: chain link, and a
// signature on every Every-th message (the clock rule off, so that only
// Every counts).
func BenchmarkPublisher(b *testing.B) {
	tr := newTestRun(b, "bench", 1)
	for _, every := range []int{1, 16, 64, 256, 1024} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("every=%d/%dB", every, n), func(b *testing.B) {
				p := tr.publisher(b, "party-1", subj("bench", "out", 1), Policy{Every: every, MaxDelay: -1})
				pl := payload(1, n)
				loop(b, func() { p.Append(pl, false) })
			})
		}
	}
}

// BenchmarkPublisherClock is BenchmarkPublisher with the default policy
// (Every and the MaxDelay clock rule); at benchmark speed the clock rule
// signs one message every 50 ms.
func BenchmarkPublisherClock(b *testing.B) {
	tr := newTestRun(b, "bench", 1)
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			p := tr.publisher(b, "party-1", subj("bench", "out", 1), Policy{})
			pl := payload(1, n)
			loop(b, func() { p.Append(pl, false) })
		})
	}
}

// BenchmarkVerifier is the receiver's cost per message: chain link, and a
// signature check on every Every-th message.
func BenchmarkVerifier(b *testing.B) {
	tr := newTestRun(b, "bench", 1)
	const batch = 4096
	for _, every := range []int{1, 16, 64, 256, 1024} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("every=%d/%dB", every, n), func(b *testing.B) {
				s := subj("bench", "out", 1)
				p := tr.publisher(b, "party-1", s, Policy{Every: every, MaxDelay: -1})
				pl := payload(1, n)
				msgs := make([]Msg, batch)
				for i := range msgs {
					st := p.Append(pl, false)
					msgs[i] = Msg{Subject: s, Seq: st.Seq, Payload: pl, Sig: st.SigHeader()}
				}
				newV := func() *Verifier {
					v, err := NewVerifier(tr.roster, VerifierOptions{Subjects: []string{s}, Every: every})
					if err != nil {
						b.Fatal(err)
					}
					return v
				}
				v := newV()
				i := 0
				var cpuOut time.Duration
				loop(b, func() {
					if i == batch {
						b.StopTimer()
						t0 := cpuTime()
						v, i = newV(), 0
						cpuOut += cpuTime() - t0
						b.StartTimer()
					}
					if err := v.Verify(&msgs[i]); err != nil {
						b.Fatal(err)
					}
					i++
				})
				_ = cpuOut // a few µs per 4096 messages: below the noise
			})
		}
	}
}

// stepSizes are the payload sizes of a PartyOutput and its Reply (h and
// h_bar) at batch b, as package schemas encodes them.
func stepSizes(b testing.TB, batch int) (out, reply int) {
	c := schemas.NewCodec()
	o, err := c.Marshal(&schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: 123456},
		IDs: make([]uint32, batch), C: make([]float64, batch), CHat: make([]float64, batch)})
	if err != nil {
		b.Fatal(err)
	}
	out = len(o)
	r, err := c.Marshal(&schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: 123456}, ReqSeq: 123456,
		H: make([]float64, batch), HBar: make([]float64, batch)})
	if err != nil {
		b.Fatal(err)
	}
	return out, len(r)
}

// BenchmarkStep is the trust layer's cost of one pipeline step at batch 1
// or 64 (real message sizes): the party appends its output, the
// aggregator verifies it and appends its reply, the party verifies the
// reply. cpu-ns/op is the CPU the trust layer adds to a step, over all
// processes; about half of it is the aggregator's.
func BenchmarkStep(b *testing.B) {
	tr := newTestRun(b, "bench", 1)
	for _, every := range []int{1, 64, 256, 1024, 4096} {
		for _, batch := range []int{1, 64} {
			outSize, replySize := stepSizes(b, batch)
			b.Run(fmt.Sprintf("every=%d/batch=%d", every, batch), func(b *testing.B) {
				pol := Policy{Every: every}
				out := tr.publisher(b, "party-1", subj("bench", "out", 1), pol)
				rep := tr.publisher(b, AggregatorID, subj("bench", "reply", 1), pol)
				vAgg, _ := NewVerifier(tr.roster, VerifierOptions{Subjects: []string{out.Subject()}, Every: every})
				vParty, _ := NewVerifier(tr.roster, VerifierOptions{Subjects: []string{rep.Subject()}, Every: every})
				plOut, plRep := payload(1, outSize), payload(2, replySize)
				var m Msg
				var hdr []byte
				loop(b, func() {
					st := out.Append(plOut, false)
					hdr = st.AppendSigHeader(hdr[:0])
					m = Msg{Subject: out.Subject(), Seq: st.Seq, Payload: plOut, Sig: unsafeString(hdr)}
					if err := vAgg.Verify(&m); err != nil {
						b.Fatal(err)
					}
					st = rep.Append(plRep, false)
					hdr = st.AppendSigHeader(hdr[:0])
					m = Msg{Subject: rep.Subject(), Seq: st.Seq, Payload: plRep, Sig: unsafeString(hdr)}
					if err := vParty.Verify(&m); err != nil {
						b.Fatal(err)
					}
				})
				b.ReportMetric(float64(outSize+replySize), "payload-B/step")
			})
		}
	}
}

// unsafeString views b as a string (the header value a NATS client would
// hand over as a string anyway).
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
