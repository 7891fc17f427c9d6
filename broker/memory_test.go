package broker_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/broker/bustest"
)

func TestMemoryDurableInUse(t *testing.T) {
	hub := broker.NewMemoryHub()
	a, b := hub.Connect("a"), hub.Connect("b")
	defer a.Close()
	defer b.Close()
	ctx := context.Background()
	nop := func(context.Context, broker.Delivery) {}
	sub, err := a.Subscribe(ctx, []string{"x"}, broker.SubscribeOptions{Durable: "d"}, nop)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Subscribe(ctx, []string{"x"}, broker.SubscribeOptions{Durable: "d"}, nop); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("second live durable: %v", err)
	}
	sub.Close()
	sub, err = b.Subscribe(ctx, []string{"x"}, broker.SubscribeOptions{Durable: "d"}, nop)
	if err != nil {
		t.Fatalf("durable after close: %v", err)
	}
	sub.Close()
}

func TestMemoryDuplicateWindow(t *testing.T) {
	hub := broker.NewMemoryHub(broker.DuplicateWindow(20 * time.Millisecond))
	b := hub.Connect("p")
	defer b.Close()
	ctx := context.Background()
	m := &broker.Message{Subject: "x", ID: "id"}
	if err := b.Publish(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, m); !errors.Is(err, broker.ErrDuplicate) {
		t.Fatalf("duplicate: %v", err)
	}
	bustest.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		return b.Publish(ctx, m) // accepted again once the window has passed
	})
	if hub.Len() != 2 || b.Duplicates() < 1 {
		t.Fatalf("len %d duplicates %d", hub.Len(), b.Duplicates())
	}
}

// Catch-up from the log (in chunks) and live delivery meet without a gap
// or a repeat while publishers keep going.
func TestMemoryCatchUpWhilePublishing(t *testing.T) {
	hub := broker.NewMemoryHub()
	b := hub.Connect("p")
	defer b.Close()
	ctx := context.Background()
	const before, during = 20000, 20000
	for i := range before {
		if err := b.Publish(ctx, &broker.Message{Subject: "s." + strconv.Itoa(i%2), Data: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := before; i < before+during; i++ {
			if err := b.Publish(ctx, &broker.Message{Subject: "s." + strconv.Itoa(i%2), Data: []byte(strconv.Itoa(i))}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var mu sync.Mutex
	next, bad := 0, ""
	sub, err := b.Subscribe(ctx, []string{"s.0"}, broker.SubscribeOptions{}, func(_ context.Context, d broker.Delivery) {
		mu.Lock()
		defer mu.Unlock()
		if string(d.Data()) != strconv.Itoa(next) && bad == "" {
			bad = "got " + string(d.Data()) + " want " + strconv.Itoa(next)
		}
		next += 2
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	wg.Wait()
	bustest.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if bad != "" {
			t.Fatal(bad)
		}
		if next < before+during {
			return errors.New("not all delivered")
		}
		return nil
	})
}
