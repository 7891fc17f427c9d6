package dataset

import (
	"fmt"
	"strings"
)

// Preset is a named preprocessing recipe for a CSV data set: how its
// columns are encoded, what happens to rows with missing values, how it is
// split into a training and a test set, and how it is scaled. The presets
// reproduce the shapes of the data sets in the AsyREVEL paper; PRESETS.md
// gives the arithmetic.
//
// Load applies the recipe in this order:
//
//  1. read the file (every row; CSV.Missing marks the rows with missing values);
//  2. split the rows as Split says, by their position in the file;
//  3. drop the rows with a missing value from both sets, if CSV.Missing is MissingDrop;
//  4. fit the encoding (one-hot categories) and the classes on the training rows
//     and encode both sets with them: a category only the test rows have gets
//     all-zero indicators;
//  5. fit Scale on the training set and apply it to both.
type Preset struct {
	Name        string
	Description string
	// File is where the data lives under a data folder (asyrevel data
	// fetch and shared/data use the same layout).
	File string

	CSV   CSVOptions
	Split TestSplit
	Scale ScaleMethod

	// The shape Load gives, as measured on the file of MANIFEST.md (the
	// tests check it): samples of each set and features.
	TrainSamples, TestSamples, Features int
}

// presets are the known recipes; see PRESETS.md for the arithmetic.
var presets = []Preset{
	{
		Name: "uci-credit-card",
		Description: "paper D1 (24,000 x 90): UCI default of credit card clients; SEX as one indicator, " +
			"EDUCATION, MARRIAGE and PAY_0, PAY_2..PAY_6 one-hot, 14 numeric columns; last 80% of the rows train",
		File: "uci-credit-card/UCI_Credit_Card.csv.gz",
		CSV: CSVOptions{
			ID:              "ID",
			Label:           "default.payment.next.month",
			Categorical:     []string{"SEX", "EDUCATION", "MARRIAGE", "PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5", "PAY_6"},
			BinaryIndicator: true,
			Missing:         MissingDrop,
		},
		Split:        TestSplit{Fraction: 0.2},
		Scale:        ScaleStandard,
		TrainSamples: 24000, TestSamples: 6000, Features: 90,
	},
	{
		Name: "give-me-some-credit",
		Description: "paper D2 (96,257 x 92): Kaggle Give Me Some Credit cs-training; rows with NA dropped, " +
			"the five count columns one-hot, 5 numeric columns; last 80% of the rows train",
		File: "give-me-some-credit/cs-training.csv.gz",
		CSV: CSVOptions{
			// The id column is the unnamed first column.
			Label: "SeriousDlqin2yrs",
			Categorical: []string{"NumberOfTime30-59DaysPastDueNotWorse", "NumberOfTimes90DaysLate",
				"NumberOfTime60-89DaysPastDueNotWorse", "NumberRealEstateLoansOrLines", "NumberOfDependents"},
			BinaryIndicator: true,
			Missing:         MissingDrop,
		},
		Split:        TestSplit{Fraction: 0.2},
		Scale:        ScaleStandard,
		TrainSamples: 96257, TestSamples: 24012, Features: 92,
	},
}

// Presets returns the known presets.
func Presets() []Preset {
	out := make([]Preset, len(presets))
	copy(out, presets)
	return out
}

// LookupPreset returns the preset called name.
func LookupPreset(name string) (Preset, error) {
	var names []string
	for _, p := range presets {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	return Preset{}, fmt.Errorf("dataset: unknown preset %q (known: %s)", name, strings.Join(names, ", "))
}

// Load reads the CSV file at path (plain or gzip) and applies the recipe
// (see Preset). The sets are named after the preset, the test set
// "NAME/test"; each sample's ID is its id in the file.
func (p Preset) Load(path string) (train, test *Dataset, err error) {
	src, err := openSource(path)
	if err != nil {
		return nil, nil, err
	}
	defer src.Close()
	if src.dir || src.format != FormatCSV {
		return nil, nil, fmt.Errorf("%s: %w: preset %s reads a CSV file, this is %s", path, ErrUnknownFormat, p.Name, describeFormat(src))
	}
	t, err := readTable(src.r, p.CSV)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	trRows, teRows, err := p.Split.rows(t.n)
	if err != nil {
		return nil, nil, err
	}
	trRows, teRows = t.keptRows(trRows, p.CSV.Missing), t.keptRows(teRows, p.CSV.Missing)
	if train, err = t.dataset(trRows, trRows, p.CSV); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	opts := p.CSV
	opts.Encoding, opts.Labels = train.Encoding, train.LabelValues
	if test, err = t.dataset(teRows, trRows, opts); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	train.Name, test.Name = p.Name, p.Name+"/test"
	if p.Scale != ScaleNone {
		s := NewScaler(p.Scale)
		if err := s.Fit(train.X); err != nil {
			return nil, nil, err
		}
		if train.X, err = s.Apply(train.X); err != nil {
			return nil, nil, err
		}
		if test.X, err = s.Apply(test.X); err != nil {
			return nil, nil, err
		}
	}
	return train, test, nil
}

// describeFormat names what a source is, for error messages.
func describeFormat(s *source) string {
	switch {
	case s.dir:
		return "a folder"
	case s.format == "":
		return "not a format this package reads"
	}
	return s.format
}
