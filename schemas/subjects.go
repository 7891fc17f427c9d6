package schemas

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind names a message type; it is also the subject token that carries it.
type Kind uint8

// Message kinds.
const (
	KindHello   Kind = iota + 1 // party -> aggregator, asyrevel.R.join.m
	KindOutput                  // party -> aggregator, asyrevel.R.out.m
	KindReply                   // aggregator -> party, asyrevel.R.reply.m
	KindEval                    // party -> aggregator, asyrevel.R.eval.m
	KindControl                 // aggregator -> all,   asyrevel.R.ctl
)

var kindTokens = [...]string{KindHello: "join", KindOutput: "out", KindReply: "reply", KindEval: "eval", KindControl: "ctl"}

// String is the subject token of k.
func (k Kind) String() string {
	if k >= KindHello && k <= KindControl {
		return kindTokens[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// MaxParties bounds party ids (1..MaxParties).
const MaxParties = 1024

// CheckRun reports whether run can name a run: 1 to 64 letters, digits, '-'
// or '_' (it becomes a subject token and part of a stream name).
func CheckRun(run string) error {
	if len(run) == 0 || len(run) > 64 {
		return fmt.Errorf("%w: run id %q must have 1 to 64 characters", ErrSubject, run)
	}
	for _, r := range run {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("%w: run id %q may hold only letters, digits, '-' and '_'", ErrSubject, run)
		}
	}
	return nil
}

// Subject is the subject of a message of kind k for party m in run
// (m is ignored for KindControl).
func Subject(run string, k Kind, m int) string {
	if k == KindControl {
		return "asyrevel." + run + ".ctl"
	}
	return "asyrevel." + run + "." + k.String() + "." + strconv.Itoa(m)
}

// Filter matches the subjects of kind k from or to every party in run.
func Filter(run string, k Kind) string {
	if k == KindControl {
		return "asyrevel." + run + ".ctl"
	}
	return "asyrevel." + run + "." + k.String() + ".*"
}

// All matches every subject of run (the stream's subject).
func All(run string) string { return "asyrevel." + run + ".>" }

// ParseSubject splits a subject of run into its kind and party id. It
// returns an error wrapping ErrSubject for a subject of another run, an
// unknown kind or a party id outside 1..MaxParties. Control subjects give
// party 0.
func ParseSubject(run, subject string) (Kind, int, error) {
	rest, ok := strings.CutPrefix(subject, "asyrevel.")
	if ok {
		rest, ok = strings.CutPrefix(rest, run)
	}
	if ok {
		rest, ok = strings.CutPrefix(rest, ".")
	}
	if !ok {
		return 0, 0, fmt.Errorf("%w: %q is not a subject of run %q", ErrSubject, subject, run)
	}
	if rest == "ctl" {
		return KindControl, 0, nil
	}
	tok, num, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, 0, fmt.Errorf("%w: %q has no party token", ErrSubject, subject)
	}
	var k Kind
	for i := KindHello; i <= KindEval; i++ {
		if kindTokens[i] == tok {
			k = i
		}
	}
	if k == 0 {
		return 0, 0, fmt.Errorf("%w: unknown message kind %q in %q", ErrSubject, tok, subject)
	}
	m, err := strconv.Atoi(num)
	if err != nil || m < 1 || m > MaxParties || strconv.Itoa(m) != num {
		return 0, 0, fmt.Errorf("%w: bad party id %q in %q", ErrSubject, num, subject)
	}
	return k, m, nil
}

// MsgID is the broker dedupe id (Nats-Msg-Id) of the message with sequence
// seq sent by sender (0 for the aggregator) in run: "R.sender.seq". Every
// sender numbers all its messages with one increasing sequence, so the id is
// unique in the run.
func MsgID(run string, sender int, seq uint64) string {
	return run + "." + strconv.Itoa(sender) + "." + strconv.FormatUint(seq, 10)
}
