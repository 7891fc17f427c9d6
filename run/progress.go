package run

import (
	"math"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/aggregator"
)

type progress struct {
	log  zerolog.Logger
	next func(aggregator.Point)
}

func newProgress(log zerolog.Logger, next func(aggregator.Point)) *progress {
	return &progress{log: log, next: next}
}

// point logs one evaluation as a progress line.
func (p *progress) point(pt aggregator.Point) {
	ev := p.log.Info()
	if pt.Final {
		ev = ev.Bool("final", true)
	}
	ev = ev.Str("elapsed", (time.Duration(pt.Seconds*1e3)*time.Millisecond).String()).
		Int64("steps", pt.Steps).
		Str("loss", fmtF(pt.TrainLoss, 4))
	if !math.IsNaN(pt.TestAccuracy) {
		ev = ev.Str("acc", fmtF(100*pt.TestAccuracy, 2)+"%")
	}
	ev.Str("msg/s", fmtF(pt.MsgsPerSec, 0)).Uint32("stale", pt.MaxStaleness).Msg("progress")
	if p.next != nil {
		p.next(pt)
	}
}
