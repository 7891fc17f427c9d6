package align

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/trust"
)

// Connect connects organisation key's holder to the run's broker at url
// as the roster's participant, with the permissions asyrevel's brokers
// grant it (trust.RunPolicy): the hub creates the run's stream if it is
// missing, a party waits for it.
func Connect(ctx context.Context, url string, roster *trust.Roster, key *trust.Key) (*broker.JetStream, error) {
	self, err := roster.Identify(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return broker.ConnectJetStream(ctx, participantConfig(url, roster, self, key))
}

func participantConfig(url string, roster *trust.Roster, self *trust.Participant, key *trust.Key) broker.JetStreamConfig {
	name := self.ID
	jc := broker.JetStreamConfig{URL: url, Run: roster.Run, Name: "align-" + name,
		Options:      []nats.Option{key.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(roster.Run, name))},
		ConsumerName: func(filters []string) string { return trust.ConsumerPrefix(name, filters) },
		LiveNew:      true,
	}
	if self.Role == trust.RoleParty {
		jc.SplitFilters, jc.DurableName = true, trust.DurableName
		jc.NoCreate, jc.WaitStream = true, true
	} else {
		jc.CreateOnly = true
	}
	return jc
}

// Local is an embedded broker with every organisation of a run connected
// to it as its own user: the in-process form (asyrevel align --inputs).
type Local struct {
	Server *broker.Server
	Roster *trust.Roster
	Keys   []*trust.Key
	Buses  []*broker.JetStream
}

// StartLocal makes the run's keys and roster for q parties, starts an
// embedded JetStream server on loopback with store dir whose only users
// are the roster's participants (with the run's permissions), and
// connects every organisation.
func StartLocal(ctx context.Context, run string, q int, dir string) (*Local, error) {
	roster, keys, err := trust.GenerateRun(run, q)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	grants, err := roster.Grants(trust.RunPolicy(roster, true))
	if err != nil {
		return nil, err
	}
	users := trust.NkeyUsers(grants)
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir,
		Configure: func(o *server.Options) { o.Nkeys = users }})
	if err != nil {
		return nil, err
	}
	l := &Local{Server: srv, Roster: roster, Keys: keys}
	// The hub first: it creates the stream the parties wait for.
	for m, k := range keys {
		b, err := Connect(ctx, srv.URL(), roster, k)
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("align: connecting %s: %w", orgName(m), err)
		}
		l.Buses = append(l.Buses, b)
	}
	return l, nil
}

// Bus is organisation m's connection.
func (l *Local) Bus(m int) broker.Bus { return l.Buses[m] }

// Close disconnects everyone and stops the server.
func (l *Local) Close() error {
	var errs []error
	for _, b := range l.Buses {
		errs = append(errs, b.Close())
	}
	l.Server.Shutdown()
	return errors.Join(errs...)
}
