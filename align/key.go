package align

import (
	"fmt"
	"strings"
	"unicode"
)

// Normalization says how a key cell becomes the string that is hashed.
// Every organisation must use the same rules; they travel in the key
// specification (Spec) and the hub refuses a party whose rules differ.
type Normalization struct {
	// KeepSpace keeps white space as it is. By default leading and
	// trailing white space is removed and inner runs of white space become
	// one space.
	KeepSpace bool
	// KeepCase keeps letter case. By default letters are folded to lower
	// case (Unicode simple folding).
	KeepCase bool
	// StripZeros removes leading zeros from a key made only of digits
	// ("007" and "7" then match; "0" stays "0"). Off by default: account
	// numbers often mean their zeros.
	StripZeros bool
}

// String is the rules in the specification's words.
func (n Normalization) String() string {
	space, cas, zeros := "trim", "fold", "keep"
	if n.KeepSpace {
		space = "keep"
	}
	if n.KeepCase {
		cas = "keep"
	}
	if n.StripZeros {
		zeros = "strip"
	}
	return "space=" + space + ",case=" + cas + ",zeros=" + zeros
}

// Cell normalises one key cell.
func (n Normalization) Cell(s string) string {
	if !n.KeepSpace {
		s = strings.Join(strings.Fields(s), " ")
	}
	if !n.KeepCase {
		s = strings.Map(unicode.ToLower, s)
	}
	if n.StripZeros && s != "" && strings.Trim(s, "0123456789") == "" {
		s = strings.TrimLeft(s, "0")
		if s == "" {
			s = "0"
		}
	}
	return s
}

// keySep joins the cells of a composite key (--key a,b): the unit
// separator, which normalised cells do not hold.
const keySep = "\x1f"

// Key normalises the cells of a composite key and joins them. An empty
// cell is an error: a missing key matches nothing reliably.
func (n Normalization) Key(cells []string) (string, error) {
	if len(cells) == 1 {
		c := n.Cell(cells[0])
		if c == "" {
			return "", errEmptyKey
		}
		return c, nil
	}
	var b strings.Builder
	for i, c := range cells {
		c = n.Cell(c)
		if c == "" {
			return "", errEmptyKey
		}
		if strings.Contains(c, keySep) {
			return "", fmt.Errorf("key cell holds the unit separator (0x1f)")
		}
		if i > 0 {
			b.WriteString(keySep)
		}
		b.WriteString(c)
	}
	return b.String(), nil
}

var errEmptyKey = fmt.Errorf("empty key")

// ProtocolVersion names this package's protocol in the specification.
const ProtocolVersion = "asyrevel-psi/2" // 2: sizes stated up front (schemas.AlignSize)

// Spec is the key specification every organisation must share: the
// protocol, the group and hash-to-group suite, the number of key columns
// and the normalisation rules. Column names are not in it (organisations
// may name their columns differently).
func Spec(columns int, n Normalization) string {
	return fmt.Sprintf("%s;ristretto255_XMD:SHA-512_R255MAP_RO_;columns=%d;%s", ProtocolVersion, columns, n)
}

// hashDST is the hash-to-group domain separation tag of a run: elements
// of one run mean nothing in another.
func hashDST(run, spec string) []byte {
	return []byte("asyrevel-align-v1/" + run + "/" + spec)
}
