package dataset_test

import (
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/asyrevel/asyrevel/dataset"
)

func ExampleReadLIBSVM() {
	const train = `+1 1:0.5 3:1
-1 2:1
-1
`
	const test = "+1 2:0.25\n" // never uses feature 3
	tr, err := dataset.ReadLIBSVM(strings.NewReader(train), dataset.LIBSVMOptions{})
	if err != nil {
		log.Fatal(err)
	}
	// The test set gets the training set's width and classes.
	te, err := dataset.ReadLIBSVM(strings.NewReader(test), dataset.LIBSVMOptions{
		Features: tr.X.NCols,
		Labels:   tr.LabelValues,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("train: %d x %d, %d non-zeros, classes %v, y %v\n", tr.Len(), tr.X.NCols, tr.X.NNZ(), tr.LabelValues, tr.Y)
	fmt.Printf("test:  %d x %d, y %v\n", te.Len(), te.X.NCols, te.Y)
	idx, val := tr.X.Row(0)
	fmt.Println("row 0:", idx, val)

	_, err = dataset.ReadLIBSVM(strings.NewReader("+1 3:1 2:1\n"), dataset.LIBSVMOptions{})
	fmt.Println(err)
	// Output:
	// train: 3 x 3, 3 non-zeros, classes [-1 1], y [1 0 0]
	// test:  1 x 3, y [1]
	// row 0: [0 2] [0.5 1]
	// dataset: malformed input: line 1: token "2:1": index 2 does not increase (previous 3)
}

func ExampleBlocks() {
	blocks, err := dataset.Blocks(123, 8)
	if err != nil {
		log.Fatal(err)
	}
	for m, b := range blocks {
		fmt.Printf("party %d: columns [%d,%d), %d wide\n", m+1, b.Lo, b.Hi, b.Len())
	}
	// Output:
	// party 1: columns [0,16), 16 wide
	// party 2: columns [16,32), 16 wide
	// party 3: columns [32,48), 16 wide
	// party 4: columns [48,63), 15 wide
	// party 5: columns [63,78), 15 wide
	// party 6: columns [78,93), 15 wide
	// party 7: columns [93,108), 15 wide
	// party 8: columns [108,123), 15 wide
}

func ExampleVerticalSplit() {
	d, err := dataset.ReadLIBSVM(strings.NewReader("+1 1:1 2:2 3:3 4:4 5:5\n-1 2:7 5:9\n"), dataset.LIBSVMOptions{})
	if err != nil {
		log.Fatal(err)
	}
	parts, blocks, err := dataset.VerticalSplit(d.X, 2)
	if err != nil {
		log.Fatal(err)
	}
	for m, p := range parts {
		fmt.Printf("party %d holds columns [%d,%d) as a %d x %d matrix:\n", m+1, blocks[m].Lo, blocks[m].Hi, p.NRows, p.NCols)
		for i := range p.NRows {
			idx, val := p.Row(i)
			fmt.Println("  ", idx, val)
		}
	}
	// Output:
	// party 1 holds columns [0,3) as a 2 x 3 matrix:
	//    [0 1 2] [1 2 3]
	//    [1] [7]
	// party 2 holds columns [3,5) as a 2 x 2 matrix:
	//    [0 1] [4 5]
	//    [1] [9]
}

func ExampleSynthetic() {
	train, test, err := dataset.Synthetic(dataset.SyntheticConfig{
		Samples:     10000,
		TestSamples: 2000,
		Features:    50,
		Density:     0.2,
		Noise:       0.05,
		Seed:        1,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(train.Name, train.Format, train.X.NRows, "x", train.X.NCols, "classes", train.LabelValues)
	fmt.Println("test samples:", test.Len())
	// Output:
	// synthetic synthetic 10000 x 50 classes [-1 1]
	// test samples: 2000
}

func ExampleWriteLIBSVM() {
	d, _, err := dataset.Synthetic(dataset.SyntheticConfig{Samples: 3, Features: 4, Density: 0.5, Seed: 3})
	if err != nil {
		log.Fatal(err)
	}
	// Round to one decimal to keep the example short.
	for k, v := range d.X.Values {
		d.X.Values[k] = float32(int(v*10)) / 10
	}
	if err := dataset.WriteLIBSVM(os.Stdout, d); err != nil {
		log.Fatal(err)
	}
	// Output:
	// -1 1:0.6 3:1.4
	// +1 1:0.6 2:-1.2 4:0.6
	// -1 2:1.3
}
