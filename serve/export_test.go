package serve

import "context"

// ScoreAll is scoreAll without progress, for benchmarks.
func ScoreAll(ctx context.Context, sc *Scorer, ids []string, chunk, window int) ([]Prediction, error) {
	return scoreAll(ctx, sc, ids, chunk, window, nil)
}
