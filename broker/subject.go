package broker

import (
	"fmt"
	"strings"
)

// SubjectMatch reports whether subject matches filter under NATS rules:
// tokens are separated by '.', "*" matches exactly one token and ">" (last
// token only) matches one or more tokens. It does not allocate.
func SubjectMatch(filter, subject string) bool {
	j := 0
	for i := 0; i < len(filter); i++ {
		c := filter[i]
		if (c == '*' || c == '>') && (i == 0 || filter[i-1] == '.') && (i+1 == len(filter) || filter[i+1] == '.') {
			if j >= len(subject) || subject[j] == '.' {
				return false // no token here
			}
			if c == '>' {
				return true
			}
			for j < len(subject) && subject[j] != '.' {
				j++
			}
			continue
		}
		if j >= len(subject) || subject[j] != c {
			return false
		}
		j++
	}
	return j == len(subject)
}

// matcher is a filter prepared for repeated matching: the literal head
// up to the first wildcard is compared at once.
type matcher struct {
	filter string
	head   int // filter[:head] is literal; head == len(filter) without wildcards
}

func newMatcher(filter string) matcher {
	head := 0
	for {
		tok, rest, more := cutToken(filter[head:])
		if tok == "*" || tok == ">" {
			return matcher{filter, head}
		}
		if !more {
			return matcher{filter, len(filter)}
		}
		head = len(filter) - len(rest)
	}
}

func (m matcher) match(subject string) bool {
	if m.head == len(m.filter) {
		return m.filter == subject
	}
	h := m.head
	return len(subject) >= h && subject[:h] == m.filter[:h] && SubjectMatch(m.filter[h:], subject[h:])
}

// filtersOverlap reports whether some subject matches both filters.
func filtersOverlap(a, b string) bool {
	for {
		at, arest, amore := cutToken(a)
		bt, brest, bmore := cutToken(b)
		if at == ">" || bt == ">" {
			return true
		}
		if at != "*" && bt != "*" && at != bt {
			return false
		}
		if !amore || !bmore {
			return amore == bmore
		}
		a, b = arest, brest
	}
}

func cutToken(s string) (tok, rest string, more bool) {
	if i := strings.IndexByte(s, '.'); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// checkSubject validates a publish subject: non-empty tokens, no
// whitespace, no wildcard tokens.
func checkSubject(subject string) error {
	if err := checkTokens(subject, false); err != nil {
		return fmt.Errorf("%w: subject %q: %s", ErrInvalid, subject, err)
	}
	return nil
}

// checkFilter validates a subscription filter: like a subject, but "*" may
// stand for a token and ">" for the last one.
func checkFilter(filter string) error {
	if err := checkTokens(filter, true); err != nil {
		return fmt.Errorf("%w: filter %q: %s", ErrInvalid, filter, err)
	}
	return nil
}

// checkFilters validates a filter list: at least one, each valid, no two
// overlapping (JetStream rejects overlapping consumer filters, so the
// in-memory bus does too).
func checkFilters(filters []string) error {
	if len(filters) == 0 {
		return fmt.Errorf("%w: no filters", ErrInvalid)
	}
	for i, f := range filters {
		if err := checkFilter(f); err != nil {
			return err
		}
		for _, g := range filters[:i] {
			if filtersOverlap(f, g) {
				return fmt.Errorf("%w: filters %q and %q overlap", ErrInvalid, g, f)
			}
		}
	}
	return nil
}

type tokenError string

func (e tokenError) Error() string { return string(e) }

func checkTokens(s string, wildcards bool) error {
	if s == "" {
		return tokenError("empty")
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			switch s[i] {
			case '.':
			case ' ', '\t', '\r', '\n', 0:
				return tokenError("contains whitespace or NUL")
			default:
				continue
			}
		}
		tok := s[start:i]
		switch {
		case tok == "":
			return tokenError("empty token")
		case tok == "*" || tok == ">":
			if !wildcards {
				return tokenError("wildcard in a subject")
			}
			if tok == ">" && i != len(s) {
				return tokenError("'>' not last")
			}
		}
		start = i + 1
	}
	return nil
}

// checkName validates a run or durable name: 1 to 128 letters, digits,
// '-' or '_'.
func checkName(kind, name string) error {
	if name == "" || len(name) > 128 {
		return fmt.Errorf("%w: %s name %q must have 1 to 128 characters", ErrInvalid, kind, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%w: %s name %q: only letters, digits, '-' and '_' are allowed", ErrInvalid, kind, name)
		}
	}
	return nil
}

// checkMessage validates m for Publish.
func checkMessage(m *Message) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrInvalid)
	}
	if err := checkSubject(m.Subject); err != nil {
		return err
	}
	if hasLineBreak(m.ID) {
		return fmt.Errorf("%w: message id %q contains a line break", ErrInvalid, m.ID)
	}
	for k, v := range m.Header {
		if err := checkHeader(k, v); err != nil {
			return err
		}
	}
	return nil
}

// checkHeader validates one header. Keys are printable ASCII without ':';
// values have no line breaks. The keys "Status", "Description" and any key
// starting with "Nats-" are reserved: NATS gives them meaning.
func checkHeader(k, v string) error {
	if k == "" {
		return fmt.Errorf("%w: empty header key", ErrInvalid)
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return fmt.Errorf("%w: header key %q has a character not allowed", ErrInvalid, k)
		}
	}
	if k == "Status" || k == "Description" || len(k) >= 5 && strings.EqualFold(k[:5], "Nats-") {
		return fmt.Errorf("%w: header key %q is reserved", ErrInvalid, k)
	}
	if hasLineBreak(v) {
		return fmt.Errorf("%w: header %q value contains a line break", ErrInvalid, k)
	}
	return nil
}

func hasLineBreak(s string) bool {
	return strings.IndexByte(s, '\n') >= 0 || strings.IndexByte(s, '\r') >= 0
}
