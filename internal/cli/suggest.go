package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/asyrevel/asyrevel/aggregator"
)

// nearest is the candidate closest to word by edit distance (at most 2, or
// a candidate that word is a prefix of), or "" when none is close.
func nearest(word string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		d := editDistance(word, c)
		if len(word) >= 3 && strings.HasPrefix(c, word) {
			d = min(d, 1)
		}
		if d < bestD || d == bestD && c < best {
			best, bestD = c, d
		}
	}
	if bestD > 2 {
		return ""
	}
	return best
}

// didYouMean is " (did you mean X?)" for the nearest candidate, else "".
func didYouMean(word string, candidates []string) string {
	if n := nearest(word, candidates); n != "" {
		return fmt.Sprintf(" (did you mean %q?)", n)
	}
	return ""
}

// commandNames are the names "asyrevel NAME" takes.
func commandNames() []string {
	names := []string{"help"}
	for _, c := range commands {
		names = append(names, c.name)
	}
	return names
}

// errUsageShown marks a usage error whose message the flag set has
// printed already (an unknown flag, a missing or bad value), so that
// execute does not print the flag package's wording of it again.
var errUsageShown = errors.New("usage shown")

// flagOutput is the output of a command's flag set. It holds back what the
// flag package writes before it calls the usage function (its error, in
// its own words: "flag provided but not defined: -x") so that the usage
// function can say it in the user's words, with a suggestion and a short
// usage line instead of every flag. -h writes nothing before usage.
type flagOutput struct {
	w       io.Writer
	pending bytes.Buffer
	through bool // printing the full usage
}

func (o *flagOutput) Write(p []byte) (int, error) {
	if o.through {
		return o.w.Write(p)
	}
	return o.pending.Write(p)
}

// usage prints the usage of fs: for a parse error, the error in user words
// and one line; else (-h) everything.
func (o *flagOutput) usage(fs *flag.FlagSet, synopsis string) {
	msg := strings.TrimSpace(o.pending.String())
	o.pending.Reset()
	if msg == "" {
		o.through = true
		defer func() { o.through = false }()
		fmt.Fprintf(o.w, "Usage: %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
		return
	}
	fmt.Fprintf(o.w, "asyrevel %s: %s\nUsage: %s\n'asyrevel %s -h' lists every flag.\n",
		fs.Name(), flagError(fs, msg), firstLine(synopsis), fs.Name())
}

// flagError words an error of the flag package for people: flags with
// two dashes, and the nearest flag for an unknown one.
func flagError(fs *flag.FlagSet, msg string) string {
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		hint := ""
		if n := nearest(name, names); n != "" {
			hint = fmt.Sprintf(" (did you mean --%s?)", n)
		}
		return fmt.Sprintf("unknown flag --%s%s", name, hint)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Sprintf("--%s needs a value", name)
	}
	msg = strings.Replace(msg, " for flag -", " for --", 1)
	return strings.Replace(msg, "bad flag syntax: ", "cannot read the flag ", 1)
}

// firstLine is the first line of s.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// rejectedText words the rejection counts of a summary ("aggregator:shape"
// keys) for people: "the aggregator rejected 26 (shape)".
func rejectedText(rej map[string]int64) string {
	byWho := map[string][]string{}
	var who []string
	for k, n := range rej {
		if n == 0 {
			continue
		}
		w, reason, ok := strings.Cut(k, ":")
		if !ok {
			w, reason = "", k
		}
		if _, seen := byWho[w]; !seen {
			who = append(who, w)
		}
		byWho[w] = append(byWho[w], fmt.Sprintf("%d for %s", n, reason))
	}
	sort.Strings(who)
	var parts []string
	for _, w := range who {
		sort.Strings(byWho[w])
		name := w
		switch {
		case w == "":
			name = "rejected"
		case w == "aggregator":
			name = "the aggregator rejected"
		default:
			name = strings.ReplaceAll(w, "-", " ") + " rejected"
		}
		parts = append(parts, name+" "+strings.Join(byWho[w], ", "))
	}
	return strings.Join(parts, "; ") + " (summary.json: rejected)"
}

// resumedText says what a resumed aggregator did with the stream.
func resumedText(r *aggregator.Recovery) string {
	from := fmt.Sprintf("the checkpoint of step %d", r.FromSteps)
	if r.FromSteps == 0 {
		from = "the checkpoint saved when training started"
	}
	msg := fmt.Sprintf("resumed from %s: %d requests answered after it were applied again from the stream (%d replies differ from the recorded ones, %d requests missing)",
		from, r.Reapplied, r.Mismatched, r.Missing)
	if r.Skipped > 0 {
		msg += fmt.Sprintf("; %d requests delivered a second time were ignored", r.Skipped)
	}
	return msg
}
