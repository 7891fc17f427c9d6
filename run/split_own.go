package run

import (
	"fmt"

	"github.com/asyrevel/asyrevel/dataset"
)

// checkSplitFiles checks that a split folder held the files role needs: a
// folder may hold one organisation's part only (asyrevel align's
// one-organisation form lists only its own file), which is that
// organisation's process's data and no other's.
func checkSplitFiles(dir string, man *dataset.SplitManifest, role int, d *Data) error {
	var names []string
	for _, e := range man.Files {
		names = append(names, e.Name)
	}
	if (role == RoleAll || role == RoleAggregator) && len(d.TrainY) == 0 {
		return fmt.Errorf("%w: %s holds no training labels (it holds %v: one organisation's part of a split is that organisation's process's data: asyrevel party --id M or aggregator --data)",
			dataset.ErrMismatch, dir, names)
	}
	for m, x := range d.PartTrain {
		if x == nil && (role == RoleAll || role == m+1) {
			return fmt.Errorf("%w: %s holds no training file of party %d (it holds %v: one organisation's part of a split is that organisation's process's data: asyrevel party --id M or aggregator --data)",
				dataset.ErrMismatch, dir, m+1, names)
		}
	}
	return nil
}
