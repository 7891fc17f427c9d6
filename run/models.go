package run

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/serve"
)

// ModelsDir is where a run's participants write their final models:
// OUT/models.
func ModelsDir(out string) string { return filepath.Join(out, "models") }

// readSpec is how the run's raw rows became features.
func readSpec(cfg *job, data *Data) serve.ReadSpec {
	rs := serve.ReadSpec{Format: data.Format, Features: data.Features, Preset: cfg.Preset, Encoding: data.Encoding}
	if data.Format == dataset.FormatCSV {
		c := cfg.CSV
		rs.CSV = &serve.CSVSpec{Comma: c.Comma, SkipRows: c.SkipRows, ID: c.ID, Label: c.Label, Drop: c.Drop, NA: c.NA, Missing: int(c.Missing)}
	}
	return rs
}

// partyModel is party m's final model of a run as a model file.
func partyModel(cfg *job, data *Data, m int, params []float64) (*serve.File, error) {
	b := data.Blocks[m-1]
	k := cfg.Outputs(data.Classes)
	f := &serve.File{
		Run: cfg.Run, Role: serve.RoleParty, Party: m, Parties: cfg.Parties, Algo: cfg.Algo, Dataset: data.Name,
		Kind: cfg.Model, In: b.Len(), Out: k, K: k, Params: slices.Clone(params),
		Read:    readSpec(cfg, data),
		Columns: &serve.Columns{Lo: b.Lo, Hi: b.Hi},
	}
	switch cfg.Model {
	case "mlp":
		f.Hidden = cfg.Hidden
	case "codebook":
		f.Codes = cfg.Codes
	case "external":
		argv, err := model.ParseCommand(cfg.ModelCmd)
		if err != nil {
			return nil, err
		}
		f.External = &serve.External{Argv: argv, TimeoutMS: cfg.ModelTimeout.Milliseconds()}
	}
	if len(data.Names) >= b.Hi && slices.ContainsFunc(data.Names[b.Lo:b.Hi], func(s string) bool { return s != "" }) {
		f.Columns.Names = slices.Clone(data.Names[b.Lo:b.Hi])
	}
	if m-1 < len(data.Scalers) {
		f.Columns.Scaler = data.Scalers[m-1]
	}
	if key := cfg.trust.key(m); key != nil {
		if err := f.Sign(key); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// aggregatorModel is the aggregator's final head of a run as a model file.
func aggregatorModel(cfg *job, data *Data, params []float64, steps int64) (*serve.File, error) {
	head, k := NewHead(&cfg.Config, data.Classes)
	kind := serve.KindSoftmax
	switch {
	case cfg.LabelFree:
		kind = serve.KindEmbed
	case data.Classes <= 2:
		kind = serve.KindLogisticBias
		if cfg.NoBias {
			kind = serve.KindLogistic
		}
	}
	values := data.LabelValues
	if len(values) < head.Classes() { // synthetic data: class indices
		values = make([]float64, head.Classes())
		for c := range values {
			values[c] = float64(c)
		}
	}
	f := &serve.File{
		Run: cfg.Run, Role: serve.RoleAggregator, Parties: cfg.Parties, Algo: cfg.Algo, Dataset: data.Name, Steps: steps,
		Kind: kind, In: head.InDim(), Out: head.Classes(), K: k, Params: slices.Clone(params),
		Read:   readSpec(cfg, data),
		Labels: &serve.LabelsSpec{Classes: head.Classes(), Values: slices.Clone(values), Names: slices.Clone(data.ClassNames)},
	}
	if e, ok := head.(*model.Embed); ok {
		f.Codes, f.EmbedDim, f.Hidden = e.Codes(), e.EmbedDim(), e.Hidden()
	}
	if f.Params == nil {
		f.Params = []float64{}
	}
	if key := cfg.trust.key(0); key != nil {
		if err := f.Sign(key); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// writeModel writes f into OUT/models when the run has an output folder.
func writeModel(cfg *job, f *serve.File, err error) error {
	if err != nil {
		return fmt.Errorf("saving the final model: %w", err)
	}
	if cfg.Out == "" {
		return nil
	}
	path, err := f.Write(ModelsDir(cfg.Out))
	if err != nil {
		return fmt.Errorf("saving the final model: %w", err)
	}
	cfg.hooks.Log.Info().Str("model", path).Msg("final model saved")
	return nil
}
