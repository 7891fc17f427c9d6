package broker_test

import (
	"context"
	"fmt"

	"github.com/asyrevel/asyrevel/broker"
)

// A party publishes an output, the aggregator replies, the party reads the
// reply: two participants on one in-memory hub.
func Example() {
	ctx := context.Background()
	hub := broker.NewMemoryHub()
	party, aggregator := hub.Connect("party-1"), hub.Connect("aggregator")
	defer party.Close()
	defer aggregator.Close()

	// The aggregator answers every party output on that party's reply subject.
	asub, err := aggregator.Subscribe(ctx, []string{"asyrevel.demo.out.*"}, broker.SubscribeOptions{Durable: "aggregator"},
		func(ctx context.Context, d broker.Delivery) {
			reply := &broker.Message{Subject: "asyrevel.demo.reply.1", ID: "demo.0." + d.ID(), Data: []byte("h for " + string(d.Data()))}
			if err := aggregator.Publish(ctx, reply); err != nil {
				fmt.Println("reply:", err)
			}
			d.Ack() // cumulative: everything up to d is done
		})
	if err != nil {
		panic(err)
	}
	defer asub.Close()

	replies := make(chan string, 1)
	psub, err := party.Subscribe(ctx, []string{"asyrevel.demo.reply.1"}, broker.SubscribeOptions{},
		func(_ context.Context, d broker.Delivery) {
			replies <- fmt.Sprintf("seq %d %s: %s", d.Seq(), d.Subject(), d.Data()) // copy: Data dies with the call
		})
	if err != nil {
		panic(err)
	}
	defer psub.Close()

	if err := party.Publish(ctx, &broker.Message{Subject: "asyrevel.demo.out.1", ID: "demo.1.1", Data: []byte("c")}); err != nil {
		panic(err)
	}
	fmt.Println(<-replies)
	n, _ := party.Count(ctx, "asyrevel.demo.>")
	fmt.Println("stored:", n)
	// Output:
	// seq 2 asyrevel.demo.reply.1: h for c
	// stored: 2
}
