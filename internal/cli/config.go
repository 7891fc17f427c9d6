package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A run file (asyrevel train|aggregator|party|broker --config FILE) holds
// the settings of a run in YAML. Its keys are the commands' flag names, so
// that the file and the flags fill the same run.Config:
//
//	run: demo                      # top level: every command that has the flag
//	nats: [nats://n1:4222, nats://n2:4222, nats://n3:4222]
//	parties: 4
//	batch: 64
//	aggregator:                    # one command's section
//	  data: split/aggregator
//	  duration: 60s
//	party:
//	  window: 8                    # every party
//	  1: {data: split/party-1}     # party 1 only (asyrevel party --id 1)
//	broker:
//	  cluster-name: demo
//	  1: {server-name: n1}
//
// A flag given on the command line wins over the file; in the file, an id's
// entry wins over its section, a section over the top level. A list is
// joined with commas (the flags' form). An unknown key, a key in a section
// whose command lacks the flag, or a value the flag refuses is an error
// naming the file's line; every command's values are checked whichever
// command reads the file.

// runFileSections are the commands a run file has a section for.
var runFileSections = []string{"train", "aggregator", "party", "broker"}

// runFile is a parsed run file.
type runFile struct {
	path string
	top  []setting
	sect map[string]*fileSection
}

// fileSection is one command's section of a run file.
type fileSection struct {
	all  []setting
	byID map[int][]setting
	line int
}

// setting is one key of a run file, its value in the flag's form and its line.
type setting struct {
	key, value string
	line       int
}

// errRunFile marks a bad run file (exit 2, like a bad flag).
var errRunFile = errUsage

// loadRunFile reads and checks the run file at path.
func loadRunFile(path string) (*runFile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: --config %s: no such run file (see examples/run.yaml)", errRunFile, path)
		}
		return nil, fmt.Errorf("%w: --config: %w", errRunFile, err)
	}
	rf, err := parseRunFile(path, raw)
	if err != nil {
		return nil, err
	}
	if err := rf.check(); err != nil {
		return nil, err
	}
	return rf, nil
}

// parseRunFile parses a run file's text (path is for messages).
func parseRunFile(path string, raw []byte) (*runFile, error) {
	rf := &runFile{path: path, sect: map[string]*fileSection{}}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errRunFile, path, err)
	}
	if len(doc.Content) == 0 {
		return rf, nil // an empty file sets nothing
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, rf.errAt(root.Line, "want a mapping of settings (key: value), not a %s", kindName(root))
	}
	known := allRunFileKeys()
	err := eachPair(rf, root, func(k, v *yaml.Node) error {
		if slices.Contains(runFileSections, k.Value) {
			s, err := rf.section(k.Value, v)
			if err != nil {
				return err
			}
			rf.sect[k.Value] = s
			return nil
		}
		if !known[k.Value] {
			return rf.unknown(k)
		}
		st, err := rf.value(k, v)
		if err != nil {
			return err
		}
		rf.top = append(rf.top, st)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rf, nil
}

// section parses one command's section: flags for all its members and,
// under integer keys, for one member (party or broker id).
func (rf *runFile) section(name string, n *yaml.Node) (*fileSection, error) {
	s := &fileSection{byID: map[int][]setting{}, line: n.Line}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return s, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, rf.errAt(n.Line, "%s: want a mapping of %s flags, not a %s", name, name, kindName(n))
	}
	flags := commandFlags(name)
	keyOK := func(k *yaml.Node) error {
		if flags.Lookup(k.Value) == nil || k.Value == "config" || k.Value == "id" {
			if allRunFileKeys()[k.Value] {
				return rf.errAt(k.Line, "%q is not a flag of asyrevel %s (it belongs to %s)", k.Value, name, strings.Join(commandsWith(k.Value), ", "))
			}
			return rf.unknown(k)
		}
		return nil
	}
	err := eachPair(rf, n, func(k, v *yaml.Node) error {
		if id, err := strconv.Atoi(k.Value); err == nil {
			if name != "party" && name != "broker" {
				return rf.errAt(k.Line, "%s: numbered entries are for the party and broker sections", name)
			}
			if id < 1 {
				return rf.errAt(k.Line, "%s %d: ids start at 1", name, id)
			}
			if v.Kind != yaml.MappingNode {
				return rf.errAt(v.Line, "%s %d: want a mapping of %s flags, not a %s", name, id, name, kindName(v))
			}
			return eachPair(rf, v, func(k, v *yaml.Node) error {
				if err := keyOK(k); err != nil {
					return err
				}
				st, err := rf.value(k, v)
				s.byID[id] = append(s.byID[id], st)
				return err
			})
		}
		if err := keyOK(k); err != nil {
			return err
		}
		st, err := rf.value(k, v)
		s.all = append(s.all, st)
		return err
	})
	return s, err
}

// eachPair calls fn for each key and value of a mapping, refusing
// duplicate and non-scalar keys.
func eachPair(rf *runFile, m *yaml.Node, fn func(k, v *yaml.Node) error) error {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return rf.errAt(k.Line, "a key must be a name, not a %s", kindName(k))
		}
		if l, ok := seen[k.Value]; ok {
			return rf.errAt(k.Line, "%q given twice (first on line %d)", k.Value, l)
		}
		seen[k.Value] = k.Line
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// value turns a setting's YAML value into the flag's text: a scalar as it
// is, a list of scalars joined with commas.
func (rf *runFile) value(k, v *yaml.Node) (setting, error) {
	st := setting{key: k.Value, line: k.Line}
	switch {
	case v.Kind == yaml.AliasNode:
		return rf.value(k, v.Alias)
	case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
		return st, rf.errAt(v.Line, "%s: no value", k.Value)
	case v.Kind == yaml.ScalarNode:
		st.value = v.Value
	case v.Kind == yaml.SequenceNode:
		var items []string
		for _, it := range v.Content {
			if it.Kind != yaml.ScalarNode {
				return st, rf.errAt(it.Line, "%s: a list of plain values, not of a %s", k.Value, kindName(it))
			}
			items = append(items, it.Value)
		}
		st.value = strings.Join(items, ",")
	default:
		return st, rf.errAt(v.Line, "%s: want a value, not a %s", k.Value, kindName(v))
	}
	return st, nil
}

func (rf *runFile) errAt(line int, format string, a ...any) error {
	return fmt.Errorf("%w: %s:%d: %s", errRunFile, rf.path, line, fmt.Sprintf(format, a...))
}

func (rf *runFile) unknown(k *yaml.Node) error {
	msg := fmt.Sprintf("unknown key %q: a run file's keys are the flags of asyrevel train, aggregator, party and broker, and their sections %s", k.Value, strings.Join(runFileSections, ", "))
	if near := nearestKey(k.Value); near != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", near)
	}
	return rf.errAt(k.Line, "%s", msg)
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "value"
	}
	return "YAML node"
}

// settings merges what the file says for command cmd (member id): the top
// level's keys that cmd has, then its section's, then its id's entry.
func (rf *runFile) settings(fs *flag.FlagSet, cmd string, id int) []setting {
	var out []setting
	add := func(sts []setting) {
		for _, st := range sts {
			if fs.Lookup(st.key) == nil {
				continue // another command's flag
			}
			if i := slices.IndexFunc(out, func(o setting) bool { return o.key == st.key }); i >= 0 {
				out[i] = st
				continue
			}
			out = append(out, st)
		}
	}
	add(rf.top)
	if s := rf.sect[cmd]; s != nil {
		add(s.all)
		add(s.byID[id])
	}
	return out
}

// apply sets the flags of fs (command cmd, member id) that the command
// line left unset from the file.
func (rf *runFile) apply(fs *flag.FlagSet, cmd string, id int) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, st := range rf.settings(fs, cmd, id) {
		if given[st.key] || st.key == "config" || st.key == "id" {
			continue
		}
		if err := fs.Set(st.key, st.value); err != nil {
			return rf.errAt(st.line, "%s: %q: %v", st.key, st.value, err)
		}
	}
	return nil
}

// check applies the file to a fresh flag set of every command it
// configures (each party and broker entry), so that a bad value is found
// whichever command reads the file.
func (rf *runFile) check() error {
	type member struct {
		cmd string
		id  int
	}
	members := []member{{"train", 0}, {"aggregator", 0}, {"party", 0}, {"broker", 0}}
	for _, cmd := range []string{"party", "broker"} {
		if s := rf.sect[cmd]; s != nil {
			ids := make([]int, 0, len(s.byID))
			for id := range s.byID {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			for _, id := range ids {
				members = append(members, member{cmd, id})
			}
		}
	}
	for _, m := range members {
		if err := rf.apply(commandFlags(m.cmd), m.cmd, m.id); err != nil {
			return err
		}
	}
	return nil
}

// commandFlags is a fresh flag set of command cmd, as the command builds
// it, for reading and checking run files.
func commandFlags(cmd string) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	switch cmd {
	case "train":
		newTrainFlags(fs, roleTrain)
		fs.String("cpuprofile", "", "")
	case "aggregator":
		newTrainFlags(fs, roleAggregator)
	case "party":
		newTrainFlags(fs, roleParty)
		fs.Int("id", 0, "")
	case "broker":
		newBrokerFlags(fs)
	}
	return fs
}

// allRunFileKeys are the keys a run file's top level may hold.
func allRunFileKeys() map[string]bool {
	keys := map[string]bool{}
	for _, cmd := range runFileSections {
		commandFlags(cmd).VisitAll(func(f *flag.Flag) { keys[f.Name] = true })
	}
	delete(keys, "id")
	delete(keys, "config")
	return keys
}

// commandsWith lists the commands that have flag name.
func commandsWith(name string) []string {
	var cmds []string
	for _, cmd := range runFileSections {
		if commandFlags(cmd).Lookup(name) != nil {
			cmds = append(cmds, cmd)
		}
	}
	return cmds
}

// nearestKey is the known key closest to k by edit distance, if close.
func nearestKey(k string) string {
	best, bestD := "", 3
	for key := range allRunFileKeys() {
		if d := editDistance(k, key); d < bestD || d == bestD && key < best {
			best, bestD = key, d
		}
	}
	if bestD > 2 {
		return ""
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// applyRunFile sets the flags of fs that the command line left unset from
// the run file at path (see runFile).
func (f *trainFlags) applyRunFile(fs *flag.FlagSet, path string) error {
	rf, err := loadRunFile(path)
	if err != nil {
		return err
	}
	cmd := map[role]string{roleTrain: "train", roleAggregator: "aggregator", roleParty: "party"}[f.role]
	id := 0
	if fl := fs.Lookup("id"); fl != nil {
		id, _ = strconv.Atoi(fl.Value.String())
	}
	return rf.apply(fs, cmd, id)
}
