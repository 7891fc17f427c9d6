package bustest

import (
	"context"
	"sync"

	"github.com/asyrevel/asyrevel/broker"
)

// CountsAtOnce is a Bus whose Count of subject First waits until subject
// Then has been counted: a reader that reads First before it starts on
// Then never gets past First (its context's deadline ends the wait), one
// that reads both at once does. Tests of readers that must not read one
// subject after the other use it.
type CountsAtOnce struct {
	broker.Bus
	First, Then string

	once    sync.Once
	counted chan struct{}
}

// NewCountsAtOnce wraps bus.
func NewCountsAtOnce(bus broker.Bus, first, then string) *CountsAtOnce {
	return &CountsAtOnce{Bus: bus, First: first, Then: then, counted: make(chan struct{})}
}

// Count implements broker.Bus.
func (b *CountsAtOnce) Count(ctx context.Context, filter string) (uint64, error) {
	switch filter {
	case b.Then:
		b.once.Do(func() { close(b.counted) })
	case b.First:
		select {
		case <-b.counted:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return b.Bus.Count(ctx, filter)
}
