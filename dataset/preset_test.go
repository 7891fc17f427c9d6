package dataset

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestRealPresets loads the presets on the MANIFEST.md files and checks the
// paper's shapes.
func TestRealPresets(t *testing.T) {
	dir := dataDir(t)
	for _, p := range Presets() {
		t.Run(p.Name, func(t *testing.T) {
			tr, te, err := p.Load(filepath.Join(dir, p.File))
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range []*Dataset{tr, te} {
				if err := d.X.Check(); err != nil {
					t.Fatal(err)
				}
			}
			if tr.Len() != p.TrainSamples || te.Len() != p.TestSamples || tr.X.NCols != p.Features || te.X.NCols != p.Features {
				t.Errorf("train %d x %d, test %d x %d; want %d, %d x %d", tr.Len(), tr.X.NCols, te.Len(), te.X.NCols, p.TrainSamples, p.TestSamples, p.Features)
			}
			names := tr.FeatureNames()
			if len(names) != p.Features {
				t.Errorf("%d feature names", len(names))
			}
			t.Logf("train %d x %d (%v), test %d; features: %s", tr.Len(), tr.X.NCols, classCounts(tr), te.Len(), strings.Join(names, " "))
		})
	}
}
