package broker

import (
	"context"
	"errors"
	"hash/maphash"
	"testing"
)

// A hash collision between two IDs must not make the second a duplicate.
func TestMemoryDedupeHashCollision(t *testing.T) {
	h := NewMemoryHub()
	b := h.Connect("p")
	ctx := context.Background()
	if err := b.Publish(ctx, &Message{Subject: "s", ID: "x"}); err != nil {
		t.Fatal(err)
	}
	// Pretend "y" hashes like "x" did.
	h.mu.Lock()
	h.ids[maphash.String(h.seed, "y")] = h.ids[maphash.String(h.seed, "x")]
	h.mu.Unlock()
	if err := b.Publish(ctx, &Message{Subject: "s", ID: "y"}); err != nil {
		t.Fatalf("colliding id taken for a duplicate: %v", err)
	}
	for _, id := range []string{"x", "y"} {
		if err := b.Publish(ctx, &Message{Subject: "s", ID: id}); !errors.Is(err, ErrDuplicate) {
			t.Fatalf("republish %s: %v", id, err)
		}
	}
	if h.Len() != 2 {
		t.Fatalf("len %d", h.Len())
	}
}
