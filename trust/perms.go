package trust

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/asyrevel/asyrevel/schemas"
)

// StreamName is the name of run's stream; it must equal
// broker.StreamName (a test checks).
func StreamName(run string) string { return "ASYREVEL_" + run }

// InboxPrefix is participant id's inbox prefix in run: its connection must
// use it (nats.CustomInboxPrefix), since it may subscribe to nothing else
// of the kind. Replies to its JetStream requests and its consumers'
// deliveries arrive there.
func InboxPrefix(run, id string) string { return "_INBOX." + run + "." + id }

// ConsumerGrant is a JetStream consumer a participant may create, read,
// delete and (with Ack) acknowledge. The consumer has exactly one filter subject,
// named in the create request's subject, so the broker refuses any other
// filter: a consumer with several filters cannot be limited this way.
type ConsumerGrant struct {
	// Names the consumer may have. nats.go's ordered consumers take a new
	// name at each reset (prefix_1, prefix_2, ...): see OrderedNames.
	Names []string
	// Filter is the consumer's one filter subject: the participant must be
	// allowed to read every subject of the run it matches.
	Filter string
	// Ack grants the acknowledgement subjects (explicit-ack consumers).
	Ack bool
}

// OrderedNames are the names an ordered consumer with name prefix prefix
// (jetstream.OrderedConsumerConfig.NamePrefix) takes in its first n
// lives: prefix_1 .. prefix_n. A consumer reset more often than n times is
// refused by the broker.
func OrderedNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + "_" + strconv.Itoa(i+1)
	}
	return out
}

// DefaultOrderedResets is how many lives DefaultConsumers grants each
// ordered consumer.
const DefaultOrderedResets = 16

// DefaultConsumers is the consumer layout of a participant, one filter
// each, for every transport design at once (the broker's configuration
// does not depend on the design a run picks):
//   - ordered consumers (AckNone; DesignOrdered, the catch-up reads of
//     DesignCapture, and every ephemeral subscription): party m reads its
//     reply subject (name prefix "party-m-reply") and the control subject
//     ("party-m-ctl"); the aggregator every party's join, out, eval and
//     rcpt subjects ("aggregator-join", ...), and its own reply and
//     control subjects (read back when it resumes);
//   - durable consumers with acknowledgements (DesignAcked), named as the
//     runtimes name their durable subscriptions, a party's split by
//     filter (DurableName): party m's "party-m-reply" and "party-m-ctl",
//     the aggregator's "aggregator" (out);
//   - a party's ordered consumers on its own join, out, eval and rcpt
//     subjects (read back when it resumes).
//
// The aggregator's subscriptions over several filters (hellos and
// evaluations together; requests, replies and controls when it resumes)
// are granted by RunPolicy.
func DefaultConsumers(r *Roster, p *Participant) []ConsumerGrant {
	var out []ConsumerGrant
	add := func(prefix, filter string) {
		out = append(out, ConsumerGrant{Names: OrderedNames(prefix, DefaultOrderedResets), Filter: filter})
	}
	durable := func(name, filter string) {
		out = append(out, ConsumerGrant{Names: []string{name}, Filter: filter, Ack: true})
	}
	if p.Role == RoleParty {
		reply, ctl := "asyrevel."+r.Run+".reply."+strconv.Itoa(p.index), "asyrevel."+r.Run+".ctl"
		add(p.ID+"-reply", reply)
		add(p.ID+"-ctl", ctl)
		durable(DurableName(p.ID, reply), reply)
		durable(DurableName(p.ID, ctl), ctl)
		// Its own messages, read back when it resumes.
		for _, k := range []string{"join", "out", "eval", "rcpt"} {
			add(p.ID+"-"+k, "asyrevel."+r.Run+"."+k+"."+strconv.Itoa(p.index))
		}
		// Private entity alignment: the hub's messages to it.
		add(p.ID+"-"+schemas.AlignHubToken, schemas.AlignHubSubject(r.Run, p.index))
		return out
	}
	for _, k := range []string{"join", "out", "eval", "rcpt", schemas.AlignToken} {
		add(p.ID+"-"+k, "asyrevel."+r.Run+"."+k+".*")
	}
	// Its own replies and controls, read back by a resumed aggregator.
	add(p.ID+"-reply", "asyrevel."+r.Run+".reply.*")
	add(p.ID+"-ctl", "asyrevel."+r.Run+".ctl")
	durable(p.ID, "asyrevel."+r.Run+".out.*")
	return out
}

// DurableName is the name of the durable consumer over filter of a
// subscription named durable whose filters are split one to a consumer
// (broker.JetStreamConfig.DurableName): durable and the filter's kind
// token ("party-1-reply").
func DurableName(durable, filter string) string {
	return ConsumerPrefix(durable, []string{filter})
}

// BrokerPolicy is what Grants derives the broker's permissions from,
// besides the roster.
type BrokerPolicy struct {
	// Stream is the run's stream; "" means StreamName(run).
	Stream string
	// Consumers lists the consumers each participant may use; nil means
	// DefaultConsumers.
	Consumers func(r *Roster, p *Participant) []ConsumerGrant
	// AggregatorCreatesStream lets the aggregator create the stream
	// ($JS.API.STREAM.CREATE; a create with another configuration than the
	// existing stream's fails, so it cannot change it). Without it, whoever
	// runs the broker creates the stream before the run.
	AggregatorCreatesStream bool
	// Extra adds subjects a participant may publish to or subscribe to
	// (for example more JetStream API subjects); they pass through
	// unchecked, but the destructive API subjects stay denied.
	Extra func(p *Participant) (publish, subscribe []string)
}

// Grant is one participant's broker user: its public key and what it may
// publish and subscribe to.
type Grant struct {
	ID          string
	PublicKey   string
	InboxPrefix string
	Publish     []string
	Subscribe   []string
	// Deny lists the publish subjects refused even if an allow entry
	// matched (defence in depth against a too broad Extra).
	Deny []string
	// Auditor marks a roster's auditor: read-only, and on a broker
	// configured by ConfigureServer a user of an account of its own
	// (AuditAccount).
	Auditor bool
}

// deniedAPI are JetStream API subjects no participant may use: they
// remove or hide stored messages, change the stream or read it past the
// consumers' filters.
var deniedAPI = []string{
	"$JS.API.STREAM.DELETE.>",
	"$JS.API.STREAM.PURGE.>",
	"$JS.API.STREAM.UPDATE.>",
	"$JS.API.STREAM.MSG.DELETE.>",
	"$JS.API.STREAM.MSG.GET.>",
	"$JS.API.DIRECT.GET.>",
	"$JS.API.STREAM.SNAPSHOT.>",
	"$JS.API.STREAM.RESTORE.>",
	"$JS.API.CONSUMER.PAUSE.>",
	"$JS.API.CONSUMER.UNPIN.>",
	"$JS.API.STREAM.LEADER.STEPDOWN.>",
	"$JS.API.CONSUMER.LEADER.STEPDOWN.>",
	"$JS.API.META.>",
	"$JS.API.ACCOUNT.>",
	"$JS.API.SERVER.>",
}

// Grants derives every participant's broker permissions from the roster.
// A party may publish only on its own join, out, eval and rcpt subjects and
// subscribe only to its reply subject, the control subject and its inbox;
// the aggregator may publish only on the control and reply subjects and
// subscribe only to the parties' subjects and its inbox. Each may use
// exactly the JetStream API subjects of its own consumers: create with its
// one filter, next message, info, delete and (Ack) acknowledgements.
// Nobody may delete, purge or update the stream, delete messages, read
// them by sequence (message get, direct get) or create, read or delete a
// consumer that is not its own.
func (r *Roster) Grants(pol BrokerPolicy) ([]Grant, error) {
	stream := pol.Stream
	if stream == "" {
		stream = StreamName(r.Run)
	}
	if !validName(stream) {
		return nil, fmt.Errorf("trust: stream name %q: letters, digits, '-' and '_' only", stream)
	}
	consumers := pol.Consumers
	if consumers == nil {
		consumers = DefaultConsumers
	}
	seen := make(map[string]string) // consumer name -> participant
	out := make([]Grant, 0, len(r.Participants))
	for i := range r.Participants {
		p := &r.Participants[i]
		g := Grant{ID: p.ID, PublicKey: p.PublicKey, InboxPrefix: InboxPrefix(r.Run, p.ID)}
		g.Publish = append(g.Publish, r.Subjects(p.ID)...)
		// Scoring with the saved models (package serve): the aggregator
		// asks on asyrevel.R.score, party m answers on asyrevel.R.scored.m
		// (both the roster's subjects, published as such above).
		if p.Role == RoleParty {
			g.Subscribe = append(g.Subscribe, "asyrevel."+r.Run+"."+ScoreToken)
		} else {
			g.Subscribe = append(g.Subscribe, "asyrevel."+r.Run+"."+ScoredToken+".*")
		}
		if p.Role == RoleParty {
			g.Subscribe = append(g.Subscribe, r.Inbound(p.ID)...)
		} else {
			for _, k := range []string{"join", "out", "eval", "rcpt", schemas.AlignToken} {
				g.Subscribe = append(g.Subscribe, "asyrevel."+r.Run+"."+k+".*")
			}
			g.Publish = append(g.Publish, "$JS.API.STREAM.INFO."+stream)
			if pol.AggregatorCreatesStream {
				g.Publish = append(g.Publish, "$JS.API.STREAM.CREATE."+stream)
			}
		}
		g.Subscribe = append(g.Subscribe, g.InboxPrefix+".>")
		readable := append(r.Inbound(p.ID), r.Subjects(p.ID)...)
		for _, c := range consumers(r, p) {
			if err := r.checkConsumer(p, c, readable); err != nil {
				return nil, err
			}
			for _, n := range c.Names {
				if q, dup := seen[n]; dup {
					return nil, fmt.Errorf("trust: consumer name %s granted to %s and %s", n, q, p.ID)
				}
				seen[n] = p.ID
				g.Publish = append(g.Publish,
					"$JS.API.CONSUMER.CREATE."+stream+"."+n+"."+c.Filter,
					"$JS.API.CONSUMER.MSG.NEXT."+stream+"."+n,
					"$JS.API.CONSUMER.INFO."+stream+"."+n,
					// nats.go's ordered consumers delete their previous
					// consumer at each reset; one's own, harmless to others.
					"$JS.API.CONSUMER.DELETE."+stream+"."+n)
				if c.Ack {
					g.Publish = append(g.Publish,
						// A durable rewound to its ack floor (server 2.14+;
						// older ones are recreated: delete and create).
						"$JS.API.CONSUMER.RESET."+stream+"."+n,
						"$JS.ACK."+stream+"."+n+".>",     // acknowledgement subjects, v1 form
						"$JS.ACK.*.*."+stream+"."+n+".>") // v2 form: domain and account hash first
				}
			}
		}
		if pol.Extra != nil {
			pub, sub := pol.Extra(p)
			g.Publish = append(g.Publish, pub...)
			g.Subscribe = append(g.Subscribe, sub...)
		}
		g.Deny = slices.Clone(deniedAPI)
		for _, s := range slices.Concat(g.Publish, g.Subscribe) {
			if !server.IsValidSubject(s) || strings.ContainsAny(s, "\"\\") {
				return nil, fmt.Errorf("trust: %s: invalid subject %q", p.ID, s)
			}
		}
		out = append(out, g)
	}
	for i := range r.Auditors {
		a := &r.Auditors[i]
		// Read-only: the stream's info and its messages one by one
		// (direct get, which needs no consumer and changes no state), its
		// own inbox for the answers; nothing else.
		g := Grant{ID: a.ID, PublicKey: a.PublicKey, InboxPrefix: InboxPrefix(r.Run, a.ID), Auditor: true}
		g.Publish = AuditorAPI(stream)
		g.Subscribe = []string{g.InboxPrefix + ".>"}
		g.Deny = slices.DeleteFunc(slices.Clone(deniedAPI), func(s string) bool { return s == "$JS.API.DIRECT.GET.>" })
		g.Deny = append(g.Deny, "asyrevel.>")
		out = append(out, g)
	}
	return out, nil
}

func (r *Roster) checkConsumer(p *Participant, c ConsumerGrant, readable []string) error {
	if len(c.Names) == 0 {
		return fmt.Errorf("trust: consumer grant of %s for %q has no name", p.ID, c.Filter)
	}
	for _, n := range c.Names {
		if !validName(n) {
			return fmt.Errorf("trust: consumer name %q of %s: letters, digits, '-' and '_' only", n, p.ID)
		}
	}
	if c.Filter == "" || !server.IsValidSubject(c.Filter) {
		return fmt.Errorf("trust: consumer %s of %s: bad filter %q", c.Names[0], p.ID, c.Filter)
	}
	if !strings.HasPrefix(c.Filter, "asyrevel."+r.Run+".") {
		return fmt.Errorf("trust: consumer %s of %s: filter %q is not within run %s", c.Names[0], p.ID, c.Filter, r.Run)
	}
	for _, s := range r.AllSubjects() {
		if server.SubjectMatchesFilter(s, c.Filter) && !slices.Contains(readable, s) {
			return fmt.Errorf("trust: consumer %s of %s: filter %q would let it read %s", c.Names[0], p.ID, c.Filter, s)
		}
	}
	return nil
}

// validName reports whether s can name a stream or consumer: 1 to 255
// letters, digits, '-' or '_'.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// NkeyUsers turns grants into the users of an embedded nats-server
// (server.Options.Nkeys). With them set and no NoAuthUser, the server
// refuses anonymous connections. No user gets response permissions:
// nobody answers requests but the server's JetStream API.
func NkeyUsers(grants []Grant) []*server.NkeyUser {
	out := make([]*server.NkeyUser, 0, len(grants))
	for _, g := range grants {
		out = append(out, &server.NkeyUser{
			Nkey: g.PublicKey,
			Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: slices.Clone(g.Publish), Deny: slices.Clone(g.Deny)},
				Subscribe: &server.SubjectPermission{Allow: slices.Clone(g.Subscribe)},
			},
		})
	}
	return out
}

// AuditAccount is the account of a run's auditors on a broker configured
// by ConfigureServer.
const AuditAccount = "ASYREVEL_AUDIT"

// AuditorAPI are the JetStream API subjects an auditor of stream may
// use: the account's and the stream's info, and the stream's messages one
// by one (direct get, which needs no consumer and changes no state).
func AuditorAPI(stream string) []string {
	return []string{"$JS.API.INFO", "$JS.API.STREAM.INFO." + stream, "$JS.API.DIRECT.GET." + stream, "$JS.API.DIRECT.GET." + stream + ".>"}
}

// ConfigureServer sets the users of an embedded nats-server that serves
// one run (server.Options; the run's stream is stream): the grants'
// participants and the extra users (the broker's operator) are users of
// the global account, which holds the run's stream, as NkeyUsers makes
// them; each auditor is a user of an account of its own, AuditAccount,
// which reaches the run's stream only through the auditor's API subjects
// (AuditorAPI), imported from the global account. The server answers an
// imported request in the importing account, at the reply subject the
// request named, and the run's stream is not there: an auditor cannot
// place a server's answer in the run's subjects (a participant's request
// with a reply subject inside the run lands there, which no permission
// can forbid: nats-server checks a publisher's subject, never its reply
// subject). The server must give the global account JetStream once it
// runs (broker.StartServer does, when accounts are configured).
func ConfigureServer(o *server.Options, stream string, grants []Grant, extra ...*server.NkeyUser) error {
	var auditors, others []Grant
	for _, g := range grants {
		if g.Auditor {
			auditors = append(auditors, g)
		} else {
			others = append(others, g)
		}
	}
	o.Nkeys = append(NkeyUsers(others), extra...)
	if len(auditors) == 0 {
		return nil
	}
	global, audit := server.NewAccount(globalAccount), server.NewAccount(AuditAccount)
	for _, s := range AuditorAPI(stream) {
		if err := global.AddServiceExport(s, []*server.Account{audit}); err != nil {
			return fmt.Errorf("trust: the auditor's account: %w", err)
		}
		if err := audit.AddServiceImport(global, s, s); err != nil {
			return fmt.Errorf("trust: the auditor's account: %w", err)
		}
	}
	for _, u := range NkeyUsers(auditors) {
		u.Account = audit
		o.Nkeys = append(o.Nkeys, u)
	}
	o.Accounts = append(o.Accounts, global, audit)
	return nil
}

// globalAccount is nats-server's global account, where users without an
// account are.
const globalAccount = "$G"

// AuthorizationBlock is the authorization block of a stock nats-server
// configuration file that gives the same users and permissions as
// NkeyUsers.
func AuthorizationBlock(run string, grants []Grant) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# asyrevel run %s: %d participants. Generated by 'asyrevel keys server-config';\n", run, len(grants))
	b.WriteString("# each participant connects with its nkey seed and uses its own inbox prefix.\n")
	b.WriteString("authorization {\n  users = [\n")
	for i, g := range grants {
		fmt.Fprintf(&b, "    # %s (inbox prefix %s)\n", g.ID, g.InboxPrefix)
		fmt.Fprintf(&b, "    {\n      nkey: %q\n      permissions: {\n", g.PublicKey)
		b.WriteString("        publish: {\n")
		writeList(&b, "allow", g.Publish)
		writeList(&b, "deny", g.Deny)
		b.WriteString("        }\n        subscribe: {\n")
		writeList(&b, "allow", g.Subscribe)
		b.WriteString("        }\n      }\n    }")
		if i < len(grants)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

func writeList(b *strings.Builder, key string, subjects []string) {
	fmt.Fprintf(b, "          %s: [\n", key)
	for i, s := range subjects {
		fmt.Fprintf(b, "            %q", s)
		if i < len(subjects)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("          ]\n")
}

// ConsumerPrefix is the name prefix of participant id's ordered consumer
// over filters: the id and the filters' kind tokens (join, out, eval,
// rcpt, reply, ctl), joined by '-' ("party-3-ctl", "aggregator-join-eval").
// The runtimes name their consumers so (broker.JetStreamConfig.ConsumerName)
// and RunPolicy grants those names.
func ConsumerPrefix(id string, filters []string) string {
	b := []byte(id)
	for _, f := range filters {
		tok := f
		// asyrevel.<run>.<kind>[.<m>]
		if parts := strings.SplitN(f, ".", 4); len(parts) >= 3 {
			tok = parts[2]
		}
		b = append(b, '-')
		b = append(b, tok...)
	}
	return string(b)
}

// RunPolicy is the broker policy of asyrevel's runtimes on a run's
// stream, in every transport design: DefaultConsumers (a party reads its
// reply subject and the control subject, one filter a consumer: a party
// splits its subscription to both, broker.JetStreamConfig.SplitFilters;
// the aggregator every party's join, out, eval and rcpt subjects), plus
//   - the aggregator's consumers over the join and eval subjects of every
//     party together (several filters, which the broker cannot check in
//     a permission; the aggregator may read every subject of the run: the
//     parties' and its own);
//   - stream info for every participant (a publisher reads the stream's
//     per-subject counts and last sequence: numbers of messages, no
//     contents);
//   - stream creation (never update) for the aggregator when
//     aggregatorCreates is set.
//
// No party's consumer may have several filters: the broker checks a
// consumer's filter only when it is the one filter named in the create
// request.
func RunPolicy(r *Roster, aggregatorCreates bool) BrokerPolicy {
	stream := StreamName(r.Run)
	return BrokerPolicy{
		AggregatorCreatesStream: aggregatorCreates,
		Extra: func(p *Participant) (pub, sub []string) {
			if p.Role == RoleParty {
				return []string{"$JS.API.STREAM.INFO." + stream}, nil
			}
			// The aggregator's one subscription to the join and eval
			// subjects: their order matters (a party's hello comes before
			// its initial pass). Ordered consumers (aggregator-join-eval_N)
			// and the durable aggregator-join, without a filter in the
			// create subject (several filters, server 2.10+) or with the
			// run's whole subject space (a 2.9 server, which reads it all
			// and leaves the filtering to the client).
			// Likewise its reading of the log when it resumes: the
			// requests, its replies and its controls together.
			all := "asyrevel." + r.Run + ".>"
			prefix := ConsumerPrefix(p.ID, []string{"asyrevel." + r.Run + ".join.*", "asyrevel." + r.Run + ".eval.*"})
			names := append(OrderedNames(prefix, DefaultOrderedResets), p.ID+"-join")
			recover := ConsumerPrefix(p.ID, []string{"asyrevel." + r.Run + ".out.*", "asyrevel." + r.Run + ".reply.*", "asyrevel." + r.Run + ".ctl"})
			names = append(names, OrderedNames(recover, DefaultOrderedResets)...)
			for _, n := range names {
				pub = append(pub,
					"$JS.API.CONSUMER.CREATE."+stream+"."+n,
					"$JS.API.CONSUMER.CREATE."+stream+"."+n+"."+all,
					"$JS.API.CONSUMER.MSG.NEXT."+stream+"."+n,
					"$JS.API.CONSUMER.INFO."+stream+"."+n,
					"$JS.API.CONSUMER.DELETE."+stream+"."+n)
			}
			n := p.ID + "-join"
			pub = append(pub, "$JS.API.CONSUMER.RESET."+stream+"."+n,
				"$JS.ACK."+stream+"."+n+".>", "$JS.ACK.*.*."+stream+"."+n+".>")
			return pub, nil
		},
	}
}

// OperatorUser is the broker user of whoever runs the broker for a run
// (asyrevel train, asyrevel broker): it creates the run's stream, reads
// its counts and its messages one by one (direct get: to see the final
// seal), and seals it once the run is over (a stream update, which only
// the broker's owner may make: an update could also shorten the log, and
// the owner holds the store's files anyway). It may neither publish on the
// run's subjects nor subscribe to them, nor delete or purge the stream.
func OperatorUser(run, publicKey string) *server.NkeyUser {
	stream := StreamName(run)
	allow := []string{"$JS.API.INFO", "$JS.API.STREAM.CREATE." + stream, "$JS.API.STREAM.INFO." + stream, "$JS.API.STREAM.UPDATE." + stream,
		"$JS.API.DIRECT.GET." + stream, "$JS.API.DIRECT.GET." + stream + ".>"}
	deny := slices.DeleteFunc(slices.Clone(deniedAPI), func(s string) bool {
		return s == "$JS.API.STREAM.UPDATE.>" || s == "$JS.API.DIRECT.GET.>"
	})
	return &server.NkeyUser{
		Nkey: publicKey,
		Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: allow, Deny: append(deny, "asyrevel.>")},
			Subscribe: &server.SubjectPermission{Allow: []string{InboxPrefix(run, OperatorID) + ".>"}},
		},
	}
}

// OperatorID is the name of the operator's connection (its inbox prefix
// is InboxPrefix(run, OperatorID)); it is no participant's id.
const OperatorID = "operator"
