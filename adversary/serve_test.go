package adversary

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/run"
)

// The serve categories against a trained run's models on the embedded
// broker: every request without the right credentials (none, forged,
// expired, another service's, revoked or another scope's token, over the
// client's rate) is refused by the service with the fix named, none is
// answered, and a legitimate client is answered before and after.
func TestServeAttack(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "rows.libsvm")
	var b strings.Builder
	for i := range 400 {
		x := math.Sin(float64(i))
		y := "-1"
		if x > 0 {
			y = "+1"
		}
		fmt.Fprintf(&b, "%s 1:%g 2:%g 3:%d 4:%g\n", y, x, math.Cos(float64(i)), i%3, float64(i%7)/7)
	}
	if err := os.WriteFile(data, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	ctx := context.Background()
	if _, err := run.Train(ctx, run.New(func(c *run.Config) {
		c.Data = data
		c.Parties = 2
		c.MaxSteps = 200
		c.Batch = 8
		c.Out = out
	}), run.Hooks{}); err != nil {
		t.Fatal(err)
	}
	const scale = 30
	cats, err := ServeAttack(ctx, out, data, scale, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if len(cats) != len(serveCategories) {
		t.Fatalf("%d categories", len(cats))
	}
	for _, c := range cats {
		t.Logf("%-26s sent %3d, refused by the service %3d, answered %3d", c.Name, c.Sent, c.Rejected, c.Accepted())
		if c.Sent != scale || c.Accepted() != 0 || c.Refused != 0 {
			t.Errorf("%s: sent %d, refused %d, answered %d", c.Name, c.Sent, c.Rejected, c.Accepted())
		}
	}
}
