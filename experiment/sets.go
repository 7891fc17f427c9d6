package experiment

import (
	"fmt"
	"strings"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/run"
)

// Set is one of the paper's data sets as the experiments use it.
type Set struct {
	Name  string // as "asyrevel data fetch" names it: a9a, w8a, ..., mnist
	Label string // the paper's name, e.g. "D4 a9a"
	// Train and Test are paths relative to a data folder; Preset names
	// the CSV recipe that also makes the test split (Test is then empty).
	Train, Test, Preset string
	// Network: the paper's neural network (local MLP d_m x 128 x k and a
	// softmax head); otherwise logistic regression (linear local models).
	Network bool
}

// Sets are the available sets in the paper's order (D3 rcv1 and D6
// epsilon have no copy here).
var Sets = []Set{
	{Name: "uci-credit-card", Label: "D1 UCI credit card", Train: "uci-credit-card/UCI_Credit_Card.csv.gz", Preset: "uci-credit-card"},
	{Name: "give-me-some-credit", Label: "D2 GiveMeSomeCredit", Train: "give-me-some-credit/cs-training.csv.gz", Preset: "give-me-some-credit"},
	{Name: "a9a", Label: "D4 a9a", Train: "a9a/a9a.gz", Test: "a9a/a9a.t.gz"},
	{Name: "w8a", Label: "D5 w8a", Train: "w8a/w8a.gz", Test: "w8a/w8a.t.gz"},
	{Name: "mnist", Label: "D7 MNIST", Train: "mnist", Network: true},
	{Name: "fashion-mnist", Label: "D8 Fashion-MNIST", Train: "fashion-mnist", Network: true},
}

// LookupSet returns the set named name.
func LookupSet(name string) (Set, error) {
	for _, s := range Sets {
		if s.Name == name {
			return s, nil
		}
	}
	var names []string
	for _, s := range Sets {
		names = append(names, s.Name)
	}
	return Set{}, fmt.Errorf("%w: unknown data set %q (available: %s)", run.ErrConfig, name, strings.Join(names, ", "))
}

// Model is the local model of the set's runs: "linear" or "mlp".
func (s Set) Model() string {
	if s.Network {
		return "mlp"
	}
	return "linear"
}

// Locate finds a path relative to the data folder (see the command's
// --data-dir).
type Locate func(rel string) (string, error)

// Load reads the set's training and test sets, unsplit.
func (s Set) Load(locate Locate) (tr, te *dataset.Dataset, err error) {
	train, err := locate(s.Train)
	if err != nil {
		return nil, nil, err
	}
	if s.Preset != "" {
		p, err := dataset.LookupPreset(s.Preset)
		if err != nil {
			return nil, nil, err
		}
		tr, te, err = p.Load(train)
		if err != nil {
			return nil, nil, err
		}
	} else {
		test := ""
		if s.Test != "" {
			if test, err = locate(s.Test); err != nil {
				return nil, nil, err
			}
		}
		if tr, te, err = dataset.OpenPair(train, test); err != nil {
			return nil, nil, err
		}
	}
	tr.Name = s.Name
	return tr, te, nil
}

// Split partitions tr and te vertically over q parties into what a run in
// one process takes (run.Hooks.Loaded).
func Split(tr, te *dataset.Dataset, q int) (*run.Data, error) {
	d := &run.Data{Name: tr.Name, Features: tr.X.NCols, Classes: tr.Classes, NTrain: tr.Len(), TrainY: tr.Y}
	var err error
	d.PartTrain, d.Blocks, err = dataset.VerticalSplit(tr.X, q)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", run.ErrConfig, err)
	}
	d.PartTest = make([]*dataset.Matrix, q)
	if te != nil && te.Len() > 0 {
		d.NTest, d.TestY = te.Len(), te.Y
		for m, b := range d.Blocks {
			d.PartTest[m] = te.X.Columns(b.Lo, b.Hi)
		}
	}
	return d, nil
}

// loaded caches the sets an experiment reads more than once.
type loaded struct {
	locate Locate
	sets   map[string][2]*dataset.Dataset
}

func newLoaded(locate Locate) *loaded {
	return &loaded{locate: locate, sets: map[string][2]*dataset.Dataset{}}
}

func (l *loaded) get(s Set) (tr, te *dataset.Dataset, err error) {
	if d, ok := l.sets[s.Name]; ok {
		return d[0], d[1], nil
	}
	if tr, te, err = s.Load(l.locate); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", s.Name, err)
	}
	l.sets[s.Name] = [2]*dataset.Dataset{tr, te}
	return tr, te, nil
}

// split is Split of a cached set.
func (l *loaded) split(s Set, q int) (*run.Data, error) {
	tr, te, err := l.get(s)
	if err != nil {
		return nil, err
	}
	return Split(tr, te, q)
}
