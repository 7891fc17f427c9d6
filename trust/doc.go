// Package trust decides who may say what in a run, and makes what was
// said provable afterwards: participants' keys and the run's roster, the
// broker permissions derived from it, per-subject hash chains, message
// signatures, signed checkpoints, the receipts parties keep, and an
// auditor that checks a whole log against all of them.
//
// # Identities
//
// Each participant ("aggregator", "party-1" ... "party-Q") has its own
// NATS nkey user key pair (Ed25519); the seed stays with its owner, in a
// file of mode 0600 (WriteKeyFile, ReadKeyFile). The roster (Roster,
// roster.json) lists the run id and each participant's id, role and public
// key, and nothing secret: organisations exchange only public keys. The
// roster fixes which one participant may publish on each subject: party m
// on asyrevel.R.join.m, out.m, eval.m and rcpt.m (its receipts), the
// aggregator on asyrevel.R.reply.m and asyrevel.R.ctl.
//
// # Threat model
//
// In real time, the broker's permissions are the guard (Grants, NkeyUsers,
// AuthorizationBlock). Anonymous connections are refused; a party may
// publish only on its own subjects and read only its reply subject, the
// control subject and its inbox, through consumers whose one filter
// subject the broker checks; nobody may delete, purge or update the
// stream, delete messages, read them by sequence number (message get,
// direct get) or touch another participant's consumers. So a rogue client
// or a curious party can neither forge another participant's messages nor
// read other parties' traffic nor shorten the log. This guard holds only
// while the broker and whoever runs it are honest.
//
// Afterwards, signatures and chains are the proof, and they do not need
// the broker's honesty. Every subject's messages are numbered 1, 2, ...
// and chained: the head after message n is a SHA-256 over the previous
// head, n and the payload (NextHead), starting from a head bound to the
// run and the subject (GenesisHead). The owner signs the head (Signature,
// header Asy-Sig) at least every Policy.Every messages or MaxDelay, on
// every control message, Hello and receipt and on its last message; a
// signature proves every message before it. Receivers check the chain at
// once and the signature when it comes (Verifier): a message that extends
// the chain is accepted on the broker's word and counted as unsigned until
// a signature covers it, a gap, a replay, a foreign or bad signature or a
// broken chain is rejected and counted by reason. At intervals and at the
// end the aggregator signs a checkpoint listing every subject's sequence
// number and head (Checkpoint); each party checks the entries it can
// (CheckCheckpoint), countersigns (Receipt) and keeps the receipt in its
// own folder, outside the broker. From then on, anyone with the roster and
// one receipt can prove that the log was truncated, that messages were
// deleted, altered, reordered or inserted, or that a message was signed
// with another participant's key (Auditor, CheckLog), even against
// whoever runs the broker.
//
// What neither can do. Whoever runs the broker (or holds its store) can
// read every message: TLS (ServerTLS, ClientTLS) protects the wire, not
// the payloads from the broker. They can withhold or delay messages, and
// they can cut the log after its last signed message of each subject that
// no receipt covers yet: until a checkpoint has been countersigned, a log
// that ends early looks like a run that ended early (the auditor reports
// unsigned tails, but cannot tell a crash from a cut). A participant's
// messages are only as authentic as its key is secret, and a participant
// can sign two different histories of its own subjects; only receipts
// held by others expose that. Signatures prove who and in which order,
// not when. Checkpoints show every party how many messages every other
// party sent. And none of this stops an honest-but-curious participant
// from learning what the protocol's messages reveal (see package privacy).
//
// # In the runtimes
//
// party.Config and aggregator.Config take a Key and the Roster; with them
// every message is numbered per subject (its schemas Seq is the chain's
// sequence number), chained and signed through an Outbox, and every
// message received is checked by a Verifier before it acts (a party
// starts its reply and control subjects late, at a signed message,
// VerifierOptions.Late, with the head before it in the Asy-Prev header).
// The aggregator publishes a checkpoint every 5 s of training and a final
// one after the stop, in a seal control message (CtlSeal) whose payload
// names the checkpoint's digest and whose header CheckpointHeader carries
// it; each party checks it (CheckCheckpoint), countersigns it, keeps the
// receipt (WriteReceipt) and publishes it on its rcpt subject
// (AppendReceiptMessage). asyrevel train makes the keys and starts a broker
// whose users are the roster's (RunPolicy, OperatorUser); asyrevel audit
// verify runs an Auditor with AsReceiver over the stored log.
//
// # Resume and restart
//
// A resumed participant restores its chains and its verifier's state from
// its checkpoint (Outbox.Restore, Verifier.Restore), which it keeps sealed
// with its own key (SealState, OpenState), and goes on from there. One
// that lost its chains (a refused party's new process) restarts them
// (Publisher.Restart): its next message is signed over a chain that
// starts from RestartHead, which Verifier and Auditor accept as a restart
// by the subject's owner, never below the last accepted sequence number.
// See resume.go.
//
// # Dedupe ids
//
// The default path needs no broker dedupe ids (Nats-Msg-Id): receivers
// reject a second copy by its sequence number and the auditor reports it.
// A publisher that resends after a failure can ask for ids
// (Policy.DedupeIDs, Stamp.MsgID): an HMAC of the chain head under a key
// derived from the sender's secret, so a resent copy gets the same id and
// nobody else can predict an id and squat on it. Never use a predictable
// id such as run.sender.seq: anyone allowed to publish on the stream can
// then make the broker drop another sender's next messages as duplicates.
//
// # Cost
//
// Measured with go test -run '^$' -bench 'Chain|Sign|Verif|Publisher|Step'
// -benchmem -count 3 ./trust on the project's shared 2-core machine; CPU
// time per operation (cpu-ns/op), medians: a chain link costs 0.15 µs for a
// 66-byte message and 1.55 µs for 2.3 KB (SHA-256 with the CPU's SHA
// instructions, 1.5 GB/s; BLAKE2b is slower here); an Ed25519 signature 20
// to 22 µs and its check 45 to 55 µs. Per pipeline step (the party's output
// and the aggregator's reply, each chained by its sender and checked by its
// receiver: four links), the trust layer adds about 1.0 µs at batch 1 and
// 4.1 µs at batch 64 with the default policy, half of it on the
// aggregator. A whole step on the in-memory bus (a9a, 8 parties, window 8)
// costs 6.7 to 7.8 µs of CPU at batch 1 and 49 µs at batch 64, so the trust
// layer adds 13 to 15% and 8%; the four links alone are 9% at batch 1.
// Signing every message instead would add 130 to 150 µs a step. Neither
// Publisher.Append nor Verifier.Verify allocates.
//
// # Formats
//
// Integers are big-endian, strings carry a u16 length, binary values in
// text are unpadded base64url. The signed message of a chain signature is
// SignedMessage; its header value is "<signer>.<head>.<signature>"
// (Signature.AppendHeader). A checkpoint's canonical encoding
// (Checkpoint.MarshalBinary) is what its digest covers; a receipt is
// that checkpoint, the party's id and its countersignature over
// ReceiptSigned (Receipt.MarshalBinary on the wire, JSON in files:
// WriteReceipt, ReadReceipts). The binary decoders and the header decoder
// accept exactly one encoding per value.
package trust
