package party

import "github.com/asyrevel/asyrevel/broker"

// Sent is a message published, as kept in checkpoints.
type Sent = broker.Sent

// outboxSize is how many of the last requests a party keeps for a resume
// (broker.SentRing): its requests only, for evaluation chunks are large,
// and one lost costs an evaluation round a timeout, not the run.
const outboxSize = 64
