package run

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/model"
)

// The label-free profile (--privacy's default for the built-in models):
// every party codes its rows with a codebook fitted on its own columns by
// k-means (no label, no message), sends the codes of its training and
// test rows once, and takes no further part; the aggregator, which holds
// the labels, fits its own head on the codes (an embedding of each code,
// a hidden layer, softmax) and keeps the head that was best on a tenth
// of the training rows. No message that reaches a party depends on a
// label, so no attacker in any party's position, nor all of them
// together, infers a label better than chance (AUC 0.5), and no budget
// is spent. Measured in docs/privacy.md.
const (
	// LabelFreeMinCodes and LabelFreeMaxCodes bound the codes per party
	// output; between them a set of n training rows gets sqrt(n/2), so
	// that a code holds a few dozen rows on a small table.
	LabelFreeMinCodes = 4
	LabelFreeMaxCodes = 256
	// LabelFreeSmall is the number of training rows below which the head
	// has no hidden layer and small embeddings (a few hundred rows cannot
	// fit an MLP's thousands of parameters).
	LabelFreeSmall = 5000
)

// labelFreeCodes is the codes per party output for n training rows.
func labelFreeCodes(n int) int {
	k := int(math.Round(math.Sqrt(float64(n) / 2)))
	return min(max(k, LabelFreeMinCodes), LabelFreeMaxCodes)
}

// labelFreeAvailable reports whether the label-free profile serves the
// run: a zeroth-order algorithm with one of asyrevel's own models (a
// black box of the user's is not ours to fit without labels; TIG has no
// defense).
func (c *Config) labelFreeAvailable(algo Algorithm) bool {
	if algo.FirstOrder || c.Model == "external" {
		return false
	}
	// A defense flag of the run's own is the budget profile's: the run
	// asks for the labelled exchange it shapes.
	for _, f := range budgetFlags {
		if c.Explicit[f] {
			return false
		}
	}
	return true
}

// budgetFlags are the flags of the budget profile's defense: given, they
// make the switch pick it over the label-free profile.
var budgetFlags = []string{"reply", "delta", "min-batch", "clip", "noise", "noise-multiplier", "dp-auc", "dp-epsilon", "dp-delta", "dp-scope",
	"aggregator-batches", "label-epsilon", "max-output", "max-perturb", "head-noise", "head-clip", "head-refresh", "head-momentum", "head-ema"}

// applyLabelFree sets the label-free profile (see the constants above).
func (c *Config) applyLabelFree(ch *PrivacyChoice, n int, set func(flag, value string, apply func())) {
	ch.Profile = "label-free"
	ch.Target = "no message that reaches a party depends on a label: what any one party receives tells a label at chance, AUC 0.5, passive or active, and for all the parties together (their own columns aside)"
	c.LabelFree = true
	var notes []string
	if c.Model != "codebook" {
		if c.Explicit["model"] {
			notes = append(notes, "--model "+c.Model+" is the model --privacy off (or --privacy ...,profile=budget) trains: under the label-free profile a party's model is a codebook fitted without labels")
		}
		c.Model = "codebook"
		ch.Chose = append(ch.Chose, Setting{"model", "codebook"})
	}
	codes := labelFreeCodes(n)
	set("codes", strconv.Itoa(codes), func() { c.Codes = codes })
	// The head without a hidden layer is tried first; with enough rows a
	// head with one is tried beside it, and the better on the held-out
	// rows kept (MNIST gains from it, a9a's 123 one-hot columns do not).
	dim, hidden := model.DefaultEmbedDim, model.DefaultEmbedHidden
	if n < LabelFreeSmall {
		dim, hidden = 4, 0
	}
	set("embed-dim", strconv.Itoa(dim), func() { c.EmbedDim = dim })
	set("embed-hidden", strconv.Itoa(hidden), func() { c.EmbedHidden = hidden })
	c.EmbedHidden = max(c.EmbedHidden, 0)
	ch.BudgetEpochs = 0
	notes = append(notes, fmt.Sprintf("each party codes its rows with %d k-means codes of its own columns; the aggregator fits an embedding head on the codes and the labels and keeps the best on %g of the training rows; no budget is spent", c.Codes, aggregatorHoldOut))
	if c.Epochs > 0 {
		notes = append(notes, fmt.Sprintf("--epochs %g bounds the passes of the label holder's head over its rows", c.Epochs))
	}
	if c.MaxSteps > 0 {
		notes = append(notes, "--steps is a length of the labelled exchange, which this profile does not have: the run ends when the label holder's head stops improving (or at --epochs or --duration)")
	}
	ch.Note = strings.Join(notes, "; ")
}

// aggregatorHoldOut is the share of the training rows the label-free head
// is chosen on.
const aggregatorHoldOut = 0.1

// labelFreeAggregator is the aggregator's part of a label-free run of n
// training rows and classes classes: with a hidden layer (EmbedHidden),
// the head without one is tried beside it (Others).
func (c *Config) labelFreeAggregator(n, classes int) *aggregator.LabelFree {
	if !c.LabelFree {
		return nil
	}
	// --steps is a length of the labelled exchange, which a label-free
	// run does not have: it ends when its head stops improving, after
	// --epochs passes of the head over its rows, or at --duration.
	lf := &aggregator.LabelFree{HoldOut: aggregatorHoldOut, MaxEpochs: int(math.Ceil(c.Epochs))}
	if c.EmbedHidden > 0 {
		head, _ := NewHead(c, classes)
		e := head.(*model.Embed)
		lf.Others = []model.Head{model.NewEmbed(e.InDim(), e.Codes(), e.EmbedDim(), 0, e.Classes())}
	}
	if n < LabelFreeSmall {
		// A small table: full batches, a larger step and weight decay,
		// and a fifth of the rows to choose on (a tenth of 142 is 14).
		lf.Batch, lf.LR, lf.Decay, lf.HoldOut = 1<<30, 0.02, 1e-3, 0.2
	}
	return lf
}

// Outputs is the outputs per party of a run on classes classes: K for a
// multiclass set, 1 for a binary one (the logistic head's), except under
// the label-free profile, whose codes are K a party whatever the classes
// (nonf's single party codes its columns in 8 blocks, as the paper's
// 8-party network splits them).
func (c *Config) Outputs(classes int) int {
	if classes > 2 || c.LabelFree {
		return c.K
	}
	return 1
}
