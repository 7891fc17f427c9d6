package trust_test

import (
	"fmt"
	"slices"
	"time"

	"github.com/asyrevel/asyrevel/trust"
)

// demoRoster makes the keys and roster of a run with one party (each
// organisation makes its own key in practice: asyrevel keys --id).
func demoRoster() (*trust.Roster, *trust.Key, *trust.Key) {
	agg, _ := trust.GenerateKey()
	p1, _ := trust.GenerateKey()
	r, err := trust.NewRoster("demo", []trust.Participant{
		{ID: trust.AggregatorID, PublicKey: agg.PublicKey()},
		{ID: trust.PartyID(1), PublicKey: p1.PublicKey()},
	})
	if err != nil {
		panic(err)
	}
	return r, agg, p1
}

// A party chains and signs its outputs; the aggregator verifies them. A
// payload changed on the way is caught at the next signature.
func Example() {
	roster, _, key := demoRoster()
	out, _ := trust.NewOutbox(roster, key, trust.Policy{Every: 3})
	pub, _ := out.Publisher("asyrevel.demo.out.1")
	v, _ := trust.NewVerifier(roster, trust.VerifierOptions{Subjects: roster.Inbound(trust.AggregatorID), Every: 3})
	for i := 1; i <= 6; i++ {
		payload := fmt.Appendf(nil, "output %d", i)
		st := pub.Append(payload, i == 6)
		if i == 2 {
			payload[0] = 'O' // altered after it was chained
		}
		err := v.Verify(&trust.Msg{Subject: pub.Subject(), Seq: st.Seq, Payload: payload, Sig: st.SigHeader()})
		fmt.Printf("seq %d signed %-5v -> %s\n", st.Seq, st.Signed, result(err))
	}
	fmt.Println("rejected:", v.Rejected(), "not yet proven:", v.Unsigned())
	// Output:
	// seq 1 signed false -> accepted
	// seq 2 signed false -> accepted
	// seq 3 signed true  -> broken_chain
	// seq 4 signed false -> accepted
	// seq 5 signed false -> accepted
	// seq 6 signed true  -> accepted
	// rejected: map[broken_chain:1] not yet proven: 0
}

func result(err error) string {
	if err == nil {
		return "accepted"
	}
	return trust.Reason(err)
}

// The aggregator signs a checkpoint of what it has seen; the party checks
// it against what it sent, countersigns it and keeps the receipt. Later,
// the receipt proves that the log was cut.
func ExampleCheckLog() {
	roster, aggKey, key := demoRoster()
	out, _ := trust.NewOutbox(roster, key, trust.Policy{Every: 4})
	pub, _ := out.Publisher("asyrevel.demo.out.1")
	v, _ := trust.NewVerifier(roster, trust.VerifierOptions{Subjects: roster.Inbound(trust.AggregatorID), Every: 4})
	var log []*trust.Msg
	for i := 1; i <= 10; i++ {
		payload := fmt.Appendf(nil, "output %d", i)
		st := pub.Append(payload, false)
		m := &trust.Msg{StreamSeq: uint64(i), Subject: pub.Subject(), Seq: st.Seq, Payload: payload, Sig: st.SigHeader()}
		v.Verify(m)
		log = append(log, m)
	}
	cp, _ := trust.NewCheckpoint("demo", 1, false, time.Now(), 10, v.Entries())
	cp.Sign(aggKey, trust.AggregatorID)
	res := trust.CheckCheckpoint(cp, trust.View{Source: out, Subjects: roster.Subjects("party-1"), Own: true})
	fmt.Println("party agrees:", res.OK(), "entries matched:", res.Matched)
	receipt := trust.Countersign(cp, key, "party-1")

	rep, _ := trust.CheckLog(roster, slices.Values(log), []*trust.Receipt{receipt}, trust.AuditOptions{Every: 4})
	fmt.Println("whole log intact:", rep.Intact())
	rep, _ = trust.CheckLog(roster, slices.Values(log[:8]), []*trust.Receipt{receipt}, trust.AuditOptions{Every: 4})
	fmt.Println("cut log intact:", rep.Intact(), rep.Counts)
	// Output:
	// party agrees: true entries matched: 1
	// whole log intact: true
	// cut log intact: false map[truncated:2]
}

func ExampleParseID() {
	for _, id := range []string{"aggregator", "party-12", "party-012"} {
		role, m, err := trust.ParseID(id)
		fmt.Println(role, m, err != nil)
	}
	// Output:
	// aggregator 0 false
	// party 12 false
	//  0 true
}

// What party-1 may do on the broker.
func ExampleRoster_Grants() {
	roster, _, _ := demoRoster()
	grants, _ := roster.Grants(trust.BrokerPolicy{Consumers: func(r *trust.Roster, p *trust.Participant) []trust.ConsumerGrant {
		if p.Role == trust.RoleParty {
			return []trust.ConsumerGrant{{Names: []string{"party-1-reply"}, Filter: "asyrevel.demo.reply.1"}}
		}
		return nil
	}})
	g := grants[1]
	fmt.Println(g.ID, "inbox", g.InboxPrefix)
	for _, s := range g.Publish {
		fmt.Println("publish  ", s)
	}
	for _, s := range g.Subscribe {
		fmt.Println("subscribe", s)
	}
	// Output:
	// party-1 inbox _INBOX.demo.party-1
	// publish   asyrevel.demo.eval.1
	// publish   asyrevel.demo.join.1
	// publish   asyrevel.demo.out.1
	// publish   asyrevel.demo.psi.1
	// publish   asyrevel.demo.rcpt.1
	// publish   asyrevel.demo.scored.1
	// publish   $JS.API.CONSUMER.CREATE.ASYREVEL_demo.party-1-reply.asyrevel.demo.reply.1
	// publish   $JS.API.CONSUMER.MSG.NEXT.ASYREVEL_demo.party-1-reply
	// publish   $JS.API.CONSUMER.INFO.ASYREVEL_demo.party-1-reply
	// publish   $JS.API.CONSUMER.DELETE.ASYREVEL_demo.party-1-reply
	// subscribe asyrevel.demo.score
	// subscribe asyrevel.demo.ctl
	// subscribe asyrevel.demo.psih.1
	// subscribe asyrevel.demo.reply.1
	// subscribe _INBOX.demo.party-1.>
}
