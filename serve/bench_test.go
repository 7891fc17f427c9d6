package serve_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/serve"
)

// benchDeploy deploys the models of ASYREVEL_BENCH_RUN (a train --out
// folder; its test data ASYREVEL_BENCH_DATA), or else the 2-party
// fixture, on the embedded broker over TCP.
func benchDeploy(b *testing.B, signed bool, bus string) *serve.Deployment {
	b.Helper()
	models, data := "", os.Getenv("ASYREVEL_BENCH_DATA")
	if run := os.Getenv("ASYREVEL_BENCH_RUN"); run != "" && data != "" {
		models = filepath.Join(run, "models")
	} else {
		data, models = fixture(b, b.TempDir(), true)
	}
	keys := ""
	if os.Getenv("ASYREVEL_BENCH_RUN") != "" {
		keys = filepath.Join(os.Getenv("ASYREVEL_BENCH_RUN"), "keys")
	}
	if !signed {
		keys = serve.NoKeys
	}
	d, err := serve.Deploy(context.Background(), serve.DeployConfig{Models: models, Data: data, Keys: keys, Net: serve.NetConfig{Bus: bus},
		Timeout: 5 * time.Second, Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.Close)
	return d
}

// BenchmarkScoreOne: single-id Score calls one after the other (the
// latency of one request with nothing else in flight).
func BenchmarkScoreOne(b *testing.B) {
	for _, signed := range []bool{true, false} {
		b.Run("signed="+strconv.FormatBool(signed), func(b *testing.B) {
			d := benchDeploy(b, signed, "")
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				if _, err := d.Scorer.Score(ctx, []string{d.IDs[i%len(d.IDs)]}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScoreConcurrent: single-id Score calls from many goroutines
// (what the HTTP service sees under load).
func BenchmarkScoreConcurrent(b *testing.B) {
	for _, signed := range []bool{true, false} {
		b.Run("signed="+strconv.FormatBool(signed), func(b *testing.B) {
			d := benchDeploy(b, signed, "")
			ctx := context.Background()
			var n atomic.Int64
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := int(n.Add(1))
					if _, err := d.Scorer.Score(ctx, []string{d.IDs[i%len(d.IDs)]}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkBatch: predictions of every id of the data, in requests of
// DefaultChunk, DefaultWindow in flight (asyrevel predict); ns/op is per
// prediction.
func BenchmarkBatch(b *testing.B) {
	for _, bus := range []string{"memory", "jetstream"} {
		b.Run(bus, func(b *testing.B) {
			d := benchDeploy(b, true, bus)
			ctx := context.Background()
			b.ResetTimer()
			done := 0
			for done < b.N {
				preds, err := serve.ScoreAll(ctx, d.Scorer, d.IDs, serve.DefaultChunk, serve.DefaultWindow)
				if err != nil {
					b.Fatal(err)
				}
				done += len(preds)
			}
			b.ReportMetric(float64(done)/b.Elapsed().Seconds(), "predictions/s")
		})
	}
}
