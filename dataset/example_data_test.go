package dataset_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/asyrevel/asyrevel/dataset"
)

func ExampleReadCSV() {
	const file = `ID,SEX,EDUCATION,AGE,default.payment.next.month
1,2,2,24,1
2,1,3,NA,0
3,2,1,35,0
`
	d, err := dataset.ReadCSV(strings.NewReader(file), dataset.CSVOptions{
		Categorical:     []string{"SEX", "EDUCATION"},
		BinaryIndicator: true, // SEX becomes one 0/1 column, SEX=2
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.X.NRows, "x", d.X.NCols, d.FeatureNames())
	for i := range d.Len() {
		idx, val := d.X.Row(i)
		fmt.Println("id", d.ID(i), "class", d.Y[i], idx, val)
	}
	// Output:
	// 3 x 5 [SEX=2 EDUCATION=1 EDUCATION=2 EDUCATION=3 AGE]
	// id 1 class 1 [0 2 4] [1 1 24]
	// id 2 class 0 [3] [1]
	// id 3 class 0 [0 1 4] [1 1 35]
}

func ExampleScaler() {
	train, err := dataset.ReadCSV(strings.NewReader("a,b,y\n1,0,0\n3,0,1\n5,4,1\n"), dataset.CSVOptions{})
	if err != nil {
		log.Fatal(err)
	}
	test, err := dataset.ReadCSV(strings.NewReader("a,b,y\n7,2,0\n"), dataset.CSVOptions{Encoding: train.Encoding})
	if err != nil {
		log.Fatal(err)
	}
	// Fit on the training set only; apply to both.
	s := dataset.NewScaler(dataset.ScaleMinMax)
	if err := s.Fit(train.X); err != nil {
		log.Fatal(err)
	}
	for _, d := range []*dataset.Dataset{train, test} {
		x, err := s.Apply(d.X)
		if err != nil {
			log.Fatal(err)
		}
		for i := range x.NRows {
			row := make([]float32, x.NCols)
			idx, val := x.Row(i)
			for k, j := range idx {
				row[j] = val[k]
			}
			fmt.Println(d.ID(i), row)
		}
	}
	fmt.Println("stored dense:", s.Dense()) // a's minimum is 1: its zeros would move
	// Output:
	// 1 [0 0]
	// 2 [0.5 0]
	// 3 [1 1]
	// 1 [1.5 0.5]
	// stored dense: [0]
}

func ExampleWriteSplit() {
	d, err := dataset.ReadCSV(strings.NewReader("id,x1,x2,x3,label\nu7,1,0,2,1\nu9,0,3,0,0\n"), dataset.CSVOptions{})
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "split")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	man, err := dataset.WriteSplit(dir, 2, d, nil, dataset.SplitSource{Train: "example"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("blocks", man.Blocks)
	for _, f := range man.Files {
		fmt.Println(f.Name, f.Kind, f.Samples, "samples")
	}
	if err := man.Verify(dir); err != nil {
		log.Fatal(err)
	}

	// Each party loads only its file; the aggregator only the labels.
	labels, err := dataset.LoadLabels(filepath.Join(dir, dataset.LabelsFileName("train")))
	if err != nil {
		log.Fatal(err)
	}
	p2, err := dataset.LoadPartyFile(filepath.Join(dir, dataset.PartyFileName(2, "train")))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("party 2 holds", p2.Names, "of", p2.IDs, "labels", labels.Y)
	fmt.Println("aligned:", dataset.Align(labels, p2))
	p2.IDs[1] = "u8"
	fmt.Println(dataset.Align(labels, p2))
	// Output:
	// blocks [{0 2} {2 3}]
	// labels.train.gz labels 2 samples
	// party-1.train.gz party 2 samples
	// party-2.train.gz party 2 samples
	// party 2 holds [x3] of [u7 u9] labels [1 0]
	// aligned: <nil>
	// dataset: parts do not match: sample 2 is "u9" in the labels but "u8" in the party 2
}

func ExampleLookupPreset() {
	p, err := dataset.LookupPreset("give-me-some-credit")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.File)
	fmt.Println(p.Split)
	fmt.Println("missing:", p.CSV.Missing, "one-hot:", len(p.CSV.Categorical), "columns; scaling:", p.Scale)
	fmt.Printf("train %d x %d, test %d\n", p.TrainSamples, p.Features, p.TestSamples)
	// train, test, err := p.Load("data/give-me-some-credit/cs-training.csv.gz")
	// Output:
	// give-me-some-credit/cs-training.csv.gz
	// test = the first 0.2 of the rows, train = the rest, in file order
	// missing: drop one-hot: 5 columns; scaling: standard
	// train 96257 x 92, test 24012
}
