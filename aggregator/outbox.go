package aggregator

import "github.com/asyrevel/asyrevel/broker"

// Sent is a message published, as kept in checkpoints.
type Sent = broker.Sent

// outboxSize is how many of the last messages the aggregator keeps for a
// resume (broker.SentRing).
const outboxSize = 256
