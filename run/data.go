package run

import (
	"errors"
	"fmt"

	"github.com/asyrevel/asyrevel/dataset"
)

// Data is a run's vertically partitioned data set: what each party holds
// and what the aggregator holds (dataset.Vertical).
type Data = dataset.Vertical

// Roles for LoadData.
const (
	RoleAll        = dataset.RoleAll        // everything: a whole run in one process
	RoleAggregator = dataset.RoleAggregator // labels only
)

// LoadData reads (or generates) the data of cfg for a role: RoleAll,
// RoleAggregator, or a party id 1..q (that party's columns only). PATH may
// be a LIBSVM or CSV file, a folder of IDX files, a split folder written by
// `asyrevel data split` (each party reads only its own file), or synthetic
// (dataset.LoadVertical). What loading found worth saying is in the
// Data's Warnings (a run logs them).
func LoadData(cfg *Config, role int) (*Data, error) {
	return loadData(&job{Config: *cfg}, role)
}

// loadData is LoadData for a run: its data may be given (Hooks.Loaded),
// and it logs what loading found.
func loadData(cfg *job, role int) (*Data, error) {
	if cfg.hooks.Loaded != nil {
		if len(cfg.hooks.Loaded.Blocks) != cfg.Parties {
			return nil, fmt.Errorf("%w: data split for %d parties, run has %d", ErrConfig, len(cfg.hooks.Loaded.Blocks), cfg.Parties)
		}
		return cfg.hooks.Loaded, nil
	}
	d, err := dataset.LoadVertical(cfg.dataOptions(), role)
	if errors.Is(err, dataset.ErrOptions) {
		return nil, configError{err}
	}
	if err != nil {
		return nil, err
	}
	for _, w := range d.Warnings {
		cfg.hooks.Log.Warn().Msg(w)
	}
	return d, nil
}

// dataOptions is what dataset.LoadVertical needs of cfg.
func (c *job) dataOptions() dataset.VerticalOptions {
	csv := c.CSV
	csv.Report = c.hooks.Missing
	return dataset.VerticalOptions{
		Path: c.Data, Test: c.Test, Preset: c.Preset, CSV: csv, Synthetic: c.Synthetic,
		Parties: c.Parties, Scale: c.Scale, HoldOut: c.HoldOut, Seed: c.Seed,
		// A label-free run chooses its head on rows the aggregator holds
		// out by itself: with a test set nothing is held out for it.
		HoldOutWithoutTestOnly: c.labelFreeChosen(),
	}
}

// configError is an error of the data's options (dataset.ErrOptions): a
// usage error, which is ErrConfig for the run's callers. Its text is the
// dataset's.
type configError struct{ error }

func (e configError) Is(target error) bool { return target == ErrConfig }
func (e configError) Unwrap() error        { return e.error }

// labelFreeChosen reports whether the privacy switch picks (or picked) the
// label-free profile for this run (applyPrivacy decides it once the data
// are loaded; the rows held out must be known before).
func (c *Config) labelFreeChosen() bool {
	if c.LabelFree {
		return true
	}
	if c.Privacy == "" {
		return false
	}
	spec, err := ParsePrivacy(c.Privacy)
	if err != nil || spec.Mode == PrivacyOff || spec.Profile == "budget" {
		return false
	}
	algo, err := LookupAlgo(c.Algo)
	return err == nil && c.labelFreeAvailable(algo)
}

func logData(cfg *job, data *Data) {
	logPrivacy(cfg)
	cfg.hooks.Log.Info().Str("data", data.Name).Int("samples", data.NTrain).Int("features", data.Features).
		Int("classes", data.Classes).Int("test", data.NTest).Int("parties", cfg.Parties).
		Str("algo", cfg.Algo).Str("model", cfg.Model).Int("batch", cfg.Batch).Int("window", cfg.Window).
		Str("lr", cfg.Schedule(data.NTrain).String()).Str("run", cfg.Run).Msg("data loaded")
}
