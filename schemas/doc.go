// Package schemas is the contract between the organisations of a run: the
// five messages of the AsyREVEL protocol, their subjects, their wire codec and
// their validation. Parties and the aggregator share nothing else.
//
// Subjects, for run R and party m (1..q; the aggregator is 0):
//
//	asyrevel.R.join.m   party -> aggregator  Hello
//	asyrevel.R.out.m    party -> aggregator  PartyOutput
//	asyrevel.R.reply.m  aggregator -> party  Reply
//	asyrevel.R.eval.m   party -> aggregator  EvalOutput
//	asyrevel.R.ctl      aggregator -> all    Control
//
// Every message is a msgpack array that starts with a Header (schema
// version, party id, the sender's sequence number). Float vectors travel as
// msgpack bin blobs of little-endian float64 and sample ids as blobs of
// little-endian uint32: a reflection-free codec (Codec) writes and reads
// them without allocating once its buffers are warm.
//
// What never travels in the zeroth-order algorithms: features, labels,
// parameters, directions (or their seeds) and gradients. The messages here
// carry only sample ids, model outputs and losses.
//
// Receivers validate every message before it touches state (Validate):
// schema version, party id equal to the subject's, dimensions, finite
// values and sample ids in range. Each rejection wraps one sentinel error,
// and Reason gives a stable label to count it by.
package schemas
