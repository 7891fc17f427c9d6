package run

import (
	"context"
	"fmt"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/trust"
)

// sealStream seals the run's stream once Train's run is over (its final
// seal countersigned, every participant done), on a broker this process
// runs (the embedded broker or cluster): from then on the stream stores
// nothing more, neither a late message nor a server's answer that a
// request with a reply subject inside the run would place there
// (broker.JetStream.Seal). A run that paused or stopped early stays open:
// --resume goes on with it. A broker run elsewhere is sealed by its own
// operator (asyrevel broker --roster does it at the final seal).
func (n *network) sealStream(ctx context.Context) error {
	if !n.Embedded() || !broker.Design(n.cfg.Design).Capabilities().Log {
		return nil
	}
	b, err := n.connect(ctx, trust.OperatorID)
	if err != nil {
		return fmt.Errorf("sealing the run's stream: %w", err)
	}
	defer b.Close()
	js, ok := b.(*broker.JetStream)
	if !ok {
		return nil
	}
	return js.Seal(ctx)
}
