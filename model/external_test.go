package model

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/zoo"
)

// The tests of External run three kinds of child process:
//   - examples/quantized, built once with the go tool (skipped without it);
//   - examples/python/model.py when python3 is installed;
//   - fake models: this test binary itself, re-executed with
//     ASYREVEL_FAKE_MODEL=mode, which TestMain turns into a small
//     (mis)behaving model (runFakeModel).

const fakeModelEnv = "ASYREVEL_FAKE_MODEL"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeModelEnv); mode != "" {
		os.Exit(runFakeModel(mode))
	}
	code := m.Run()
	if quantizedDir != "" {
		os.RemoveAll(quantizedDir)
	}
	os.Exit(code)
}

var (
	quantizedOnce sync.Once
	quantizedDir  string
	quantizedBin  string
	quantizedErr  error
)

// quantizedCmd builds examples/quantized once per test binary and returns
// the command that runs it, or skips tb without the go tool.
func quantizedCmd(tb testing.TB, args ...string) []string {
	tb.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		tb.Skipf("the go tool is not in PATH (%v): cannot build examples/quantized", err)
	}
	quantizedOnce.Do(func() {
		quantizedDir, quantizedErr = os.MkdirTemp("", "asyrevel-external-test")
		if quantizedErr != nil {
			return
		}
		quantizedBin = filepath.Join(quantizedDir, "quantized")
		cmd := exec.Command(goTool, "build", "-o", quantizedBin, ".")
		cmd.Dir = filepath.Join("..", "examples", "quantized")
		if out, err := cmd.CombinedOutput(); err != nil {
			quantizedErr = fmt.Errorf("go build examples/quantized: %v\n%s", err, out)
		}
	})
	if quantizedErr != nil {
		tb.Fatal(quantizedErr)
	}
	return append([]string{quantizedBin}, args...)
}

func fakeCmd(tb testing.TB) []string {
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	return []string{exe}
}

// fakeWait is the fake model's timeouts unless a test sets one to see it
// fire: a bound on a hang only. A test that wants a failure to come at
// once (not by a timeout) asserts less than half of it; at load 20 under
// the race detector, with a dozen children starting side by side, 5 s
// timeouts fired before the children answered.
const fakeWait = 2 * time.Minute

func fakeOpts(mode string) ExternalOptions {
	return ExternalOptions{
		// GORACE: a race-enabled child would sleep 1 s before exiting.
		Env:          []string{fakeModelEnv + "=" + mode, "GORACE=atexit_sleep_ms=0"},
		Timeout:      fakeWait,
		StartTimeout: fakeWait,
		CloseTimeout: fakeWait,
		Stderr:       io.Discard,
	}
}

// syncBuffer is a bytes.Buffer safe for the stderr pump and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// quantRef is the reference implementation of examples/quantized:
// clip(q(w)^T x, -clip, clip) with q(v) = step round(v/step), summed in the
// same order so that the results agree exactly.
func quantRef(w []float64, x *dataset.Matrix, rows []uint32, k int, step, clip float64, out []float64) {
	for j, r := range rows {
		z := out[j*k : j*k+k]
		clear(z)
		idx, val := x.Row(int(r))
		for p, c := range idx {
			v := float64(val[p])
			for o := range z {
				z[o] += step * math.Round(w[int(c)*k+o]/step) * v
			}
		}
		for o := range z {
			z[o] = max(-clip, min(clip, z[o]))
		}
	}
}

func startExternal(t *testing.T, cmd []string, d int, opts ExternalOptions) *External {
	t.Helper()
	e, err := StartExternal(context.Background(), cmd, d, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// checkAgainstRef compares e with quantRef on random sparse batches,
// including empty rows and a batch with no non-zero at all.
func checkAgainstRef(t *testing.T, e *External, step, clip float64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	d, k := e.InDim(), e.OutDim()
	x := randomMatrix(rng, 100, d, 0.3, false)
	empty := &dataset.Matrix{NRows: 2, NCols: d, Indptr: []int64{0, 0, 0}}
	for trial, batch := range []int{1, 7, 64, 100} {
		w := randVec(rng, e.NumParams(), 0.5)
		rows := make([]uint32, batch)
		for i := range rows {
			rows[i] = uint32(rng.IntN(x.NRows))
		}
		got := make([]float64, batch*k)
		want := make([]float64, batch*k)
		e.Forward(w, x, rows, got)
		if err := e.Err(); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		quantRef(w, x, rows, k, step, clip, want)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("trial %d (batch %d): out[%d] = %v, reference %v", trial, batch, i, got[i], want[i])
			}
		}
	}
	got := make([]float64, 2*k)
	e.Forward(make([]float64, e.NumParams()), empty, []uint32{0, 1}, got)
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != 0 {
			t.Fatalf("empty rows: out[%d] = %v", i, v)
		}
	}
}

func TestExternalQuantized(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		k    int // OutDim asked for
		want int
	}{
		{"k=1", nil, 0, 1},
		{"k=3 by party", nil, 3, 3},
		{"k=2 by flag", []string{"-k", "2", "-step", "0.25", "-clip", "1.5"}, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr syncBuffer
			opts := ExternalOptions{OutDim: tc.k, Stderr: &stderr, StderrPrefix: "[m] "}
			e := startExternal(t, quantizedCmd(t, tc.args...), 9, opts)
			if e.InDim() != 9 || e.OutDim() != tc.want || e.NumParams() != 9*tc.want {
				t.Fatalf("dims %d %d %d", e.InDim(), e.OutDim(), e.NumParams())
			}
			if e.Name() != "external:quantized" {
				t.Errorf("Name = %q", e.Name())
			}
			step, clip := 1.0/16, 4.0
			if tc.args != nil {
				step, clip = 0.25, 1.5
			}
			checkAgainstRef(t, e, step, clip)

			// Init: the model draws small values from the seed.
			w1 := make([]float64, e.NumParams())
			w2 := make([]float64, e.NumParams())
			e.Init(w1, rand.New(rand.NewPCG(7, 7)))
			e.Init(w2, rand.New(rand.NewPCG(7, 7)))
			for i := range w1 {
				if w1[i] != w2[i] || math.Abs(w1[i]) > 0.01 {
					t.Fatalf("Init: w1[%d] = %v, w2[%d] = %v", i, w1[i], i, w2[i])
				}
			}
			if err := e.Err(); err != nil {
				t.Fatal(err)
			}
			if err := e.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			// The pump has drained stderr once Close returns.
			want := fmt.Sprintf("[m] quantized: ready: in_dim=9 out_dim=%d", tc.want)
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr %q lacks %q", stderr.String(), want)
			}
			// Use after Close fails cleanly.
			out := make([]float64, e.OutDim())
			e.Forward(make([]float64, e.NumParams()), randomMatrix(rand.New(rand.NewPCG(1, 1)), 1, 9, 1, true), []uint32{0}, out)
			if err := e.Err(); err == nil || !strings.Contains(err.Error(), "after Close") {
				t.Errorf("Err after Close = %v", err)
			}
		})
	}
}

func TestExternalInitModes(t *testing.T) {
	for _, mode := range []string{"zeros", "normal"} {
		t.Run(mode, func(t *testing.T) {
			e := startExternal(t, quantizedCmd(t, "-init", mode), 50, ExternalOptions{Stderr: io.Discard})
			w := randVec(rand.New(rand.NewPCG(1, 1)), e.NumParams(), 1)
			e.Init(w, rand.New(rand.NewPCG(2, 2)))
			var ss float64
			for _, v := range w {
				ss += v * v
			}
			rms := math.Sqrt(ss / float64(len(w)))
			switch {
			case mode == "zeros" && rms != 0,
				mode == "normal" && (rms < 0.005 || rms > 0.02):
				t.Errorf("init %s: rms %v", mode, rms)
			}
		})
	}
}

func TestExternalPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed: examples/python/model.py not tested")
	}
	if testing.Short() {
		t.Skip("short mode")
	}
	script := filepath.Join("..", "examples", "python", "model.py")
	for _, k := range []int{1, 2} {
		e := startExternal(t, []string{py, script}, 6, ExternalOptions{OutDim: k, Stderr: io.Discard, Timeout: fakeWait})
		if e.Name() != "external:quantized-py" {
			t.Errorf("Name = %q", e.Name())
		}
		checkAgainstRef(t, e, 1.0/16, 4)
		w := make([]float64, e.NumParams())
		e.Init(w, nil)
		if err := e.Err(); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExternalForwardFailures: every way a model can fail a forward call
// gives a clear, sticky error and NaN outputs, never a hang or a panic.
func TestExternalForwardFailures(t *testing.T) {
	for _, tc := range []struct {
		mode string
		want []string
	}{
		{"crash", []string{"exited (exit status 3)", "fake: boom"}},
		{"hang", []string{"no answer within 300ms", "hangs"}},
		{"partial", []string{"no answer within", "wrote only 2 bytes"}},
		{"garbage", []string{"not a frame", "length prefix", "hell", "logs to stderr"}},
		{"badmsgpack", []string{"not a frame", "map expected"}},
		{"huge", []string{"exceeds the limit"}},
		{"wrongcount", []string{"\"out\" has 11 values, want 10 (10 rows x out_dim 1)"}},
		{"oddbytes", []string{"not a whole number of float64"}},
		{"nan", []string{"output 0 of row 3 is NaN"}},
		{"inf", []string{"is +Inf"}},
		{"error", []string{"the model reported an error: weights exploded"}},
		{"wrongseq", []string{"answer has seq 3, want 2"}},
		{"wrongop", []string{"answer has op \"init\""}},
		{"exitclean", []string{"exited (exit status 0)"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			opts := fakeOpts(tc.mode)
			if tc.mode == "hang" || tc.mode == "partial" {
				opts.Timeout = 300 * time.Millisecond
			}
			e := startExternal(t, fakeCmd(t), 4, opts)
			x := randomMatrix(rand.New(rand.NewPCG(1, 2)), 10, 4, 0.5, false)
			rows := []uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
			w := []float64{1, 2, 3, 4}
			out := make([]float64, len(rows))
			start := time.Now()
			e.Forward(w, x, rows, out)
			if el := time.Since(start); el >= fakeWait/2 {
				t.Errorf("Forward took %v: it waited for its timeout (%v)", el, opts.Timeout)
			}
			err := e.Err()
			if err == nil {
				t.Fatalf("no error; out %v", out)
			}
			t.Log(err)
			if !errors.Is(err, ErrExternal) {
				t.Errorf("%v does not wrap ErrExternal", err)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			if (tc.mode == "hang" || tc.mode == "partial") != errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("errors.Is(%v, os.ErrDeadlineExceeded) wrong", err)
			}
			for i, v := range out {
				if !math.IsNaN(v) {
					t.Fatalf("out[%d] = %v, want NaN", i, v)
				}
			}
			// Sticky: the next call fails at once with the same error,
			// without a request to the model (its seq stays; a clock
			// bound on "at once" failed at load 20).
			out[0] = 0
			seq := e.seq
			e.Forward(w, x, rows[:1], out[:1])
			if !math.IsNaN(out[0]) || e.Err() != err || e.seq != seq {
				t.Errorf("second Forward: out %v, err %v, requests sent %d", out[0], e.Err(), e.seq-seq)
			}
			start = time.Now()
			if cerr := e.Close(); cerr != nil {
				t.Errorf("Close after failure: %v", cerr)
			}
			if el := time.Since(start); el >= fakeWait/2 {
				t.Errorf("Close took %v: it waited for its timeout (%v) instead of killing the failed model", el, opts.CloseTimeout)
			}
		})
	}
}

func TestExternalInitFailure(t *testing.T) {
	e := startExternal(t, fakeCmd(t), 4, fakeOpts("initbad"))
	w := make([]float64, e.NumParams())
	e.Init(w, nil)
	err := e.Err()
	if err == nil || !strings.Contains(err.Error(), "init: \"params\" has 3 values, want 4") {
		t.Fatalf("Err = %v", err)
	}
	if !math.IsNaN(w[0]) {
		t.Errorf("w = %v", w)
	}
}

func TestExternalStartFailures(t *testing.T) {
	for _, tc := range []struct {
		mode string
		cmd  []string
		d    int
		opts func(*ExternalOptions)
		want []string
	}{
		{mode: "version2", want: []string{"protocol version 2", "party version 1"}},
		{mode: "indim", want: []string{"in_dim 5", "has 4 features"}},
		{mode: "noparams", want: []string{"num_params is 0"}},
		{mode: "badinit", want: []string{"init \"random\""}},
		{mode: "ok", opts: func(o *ExternalOptions) { o.OutDim = 3 }, want: []string{"out_dim 1, the run needs 3"}},
		{mode: "bigparams", want: []string{"does not fit in a frame"}},
		{mode: "describeerror", want: []string{"reported an error: cannot load weights.bin"}},
		{mode: "exit", want: []string{"describe", "exited (exit status 2)", "no such file: weights.bin"}},
		{mode: "nodescribe", opts: func(o *ExternalOptions) { o.StartTimeout = 300 * time.Millisecond },
			want: []string{"describe", "no answer within 300ms"}},
		{mode: "garbage-start", want: []string{"not a frame", "Loading model"}},
		{cmd: []string{"/nonexistent/model"}, want: []string{"starting \"/nonexistent/model\"", "no such file"}},
		{cmd: []string{}, want: []string{"empty model command"}},
		{mode: "ok", d: -1, want: []string{"input dimension -1"}},
	} {
		name := tc.mode
		if tc.cmd != nil {
			name = fmt.Sprint(tc.cmd)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := tc.cmd
			if cmd == nil {
				cmd = fakeCmd(t)
			}
			opts := fakeOpts(tc.mode)
			if tc.opts != nil {
				tc.opts(&opts)
			}
			d := 4
			if tc.d != 0 {
				d = tc.d
			}
			start := time.Now()
			e, err := StartExternal(context.Background(), cmd, d, opts)
			if err == nil {
				e.Close()
				t.Fatal("no error")
			}
			t.Log(err)
			if el := time.Since(start); el >= fakeWait/2 {
				t.Errorf("StartExternal took %v: it waited for its timeout", el)
			}
			if !errors.Is(err, ErrExternal) {
				t.Errorf("%v does not wrap ErrExternal", err)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
}

func TestExternalStartCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	opts := fakeOpts("nodescribe")
	opts.StartTimeout = time.Minute
	start := time.Now()
	_, err := StartExternal(ctx, fakeCmd(t), 4, opts)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrExternal) {
		t.Fatalf("err = %v", err)
	}
	if el := time.Since(start); el >= opts.StartTimeout/2 {
		t.Errorf("took %v: the cancel was not heeded before the start timeout", el)
	}
	ctx, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	_, err = StartExternal(ctx, fakeCmd(t), 4, opts)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
}

func TestExternalClose(t *testing.T) {
	t.Run("clean", func(t *testing.T) {
		e := startExternal(t, fakeCmd(t), 4, fakeOpts("ok"))
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatal("second Close:", err)
		}
	})
	t.Run("ignores EOF", func(t *testing.T) {
		opts := fakeOpts("noexit")
		opts.CloseTimeout = 300 * time.Millisecond
		e := startExternal(t, fakeCmd(t), 4, opts)
		start := time.Now()
		err := e.Close()
		if err == nil || !strings.Contains(err.Error(), "did not exit within 300ms") {
			t.Fatalf("Close = %v", err)
		}
		if el := time.Since(start); el >= fakeWait/2 {
			t.Errorf("Close took %v", el)
		}
	})
	t.Run("exit status", func(t *testing.T) {
		e := startExternal(t, fakeCmd(t), 4, fakeOpts("exitfail"))
		err := e.Close()
		if err == nil || !strings.Contains(err.Error(), "exit status 1") || !strings.Contains(err.Error(), "fake: flush failed") {
			t.Fatalf("Close = %v", err)
		}
	})
	t.Run("during forward", func(t *testing.T) {
		opts := fakeOpts("hang")
		opts.CloseTimeout = 300 * time.Millisecond
		stderr := &syncBuffer{}
		opts.Stderr = stderr
		e := startExternal(t, fakeCmd(t), 4, opts)
		done := make(chan struct{})
		out := []float64{0}
		go func() {
			defer close(done)
			e.Forward(make([]float64, 4), randomMatrix(rand.New(rand.NewPCG(1, 2)), 1, 4, 1, true), []uint32{0}, out)
		}()
		// Closed once the model holds the request (it says so on
		// stderr), not after a fixed delay that a busy machine outlasts.
		for deadline := time.Now().Add(fakeWait); !strings.Contains(stderr.String(), "fake: hanging"); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the model never got the forward request")
			}
		}
		e.Close()
		select {
		case <-done:
		case <-time.After(fakeWait / 2): // a bound on a hang: Forward's own timeout is fakeWait
			t.Fatal("Forward still blocked after Close")
		}
		if err := e.Err(); err == nil || !math.IsNaN(out[0]) {
			t.Fatalf("Err = %v, out %v", err, out)
		}
		t.Log(e.Err())
	})
}

func TestExternalFrameLimit(t *testing.T) {
	opts := fakeOpts("ok")
	opts.MaxFrame = 2000
	e := startExternal(t, fakeCmd(t), 4, opts)
	x := randomMatrix(rand.New(rand.NewPCG(1, 2)), 300, 4, 1, true)
	rows := make([]uint32, 300)
	out := make([]float64, 300)
	e.Forward(make([]float64, 4), x, rows, out)
	if err := e.Err(); err == nil || !strings.Contains(err.Error(), "above the limit of 2000") {
		t.Fatalf("Err = %v", err)
	}
}

// TestExternalForwardAllocs: once the buffers have grown, Forward does not
// allocate.
func TestExternalForwardAllocs(t *testing.T) {
	e := startExternal(t, quantizedCmd(t), 16, ExternalOptions{Stderr: io.Discard})
	rng := rand.New(rand.NewPCG(1, 2))
	x := randomMatrix(rng, 256, 16, 0.12, true)
	w := randVec(rng, 16, 1)
	rows := make([]uint32, 64)
	out := make([]float64, 64)
	e.Forward(w, x, rows, out)
	if a := testing.AllocsPerRun(50, func() { e.Forward(w, x, rows, out) }); a != 0 {
		t.Errorf("Forward allocates %v times a call", a)
	}
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestExternalZerothOrderTrains trains the quantised model (a true black
// box in another process, with zero gradient almost everywhere) with the
// two-point zeroth-order estimator: logistic loss on a separable toy set of
// 2 features, Gaussian directions. With mu = 0.1 (above the quantisation
// step 1/16) the loss drops from log 2 to a fraction of it; with the paper's
// mu = 1e-3 the perturbation never crosses a quantisation boundary, every
// difference is exactly 0 and the parameters never move.
func TestExternalZerothOrderTrains(t *testing.T) {
	e := startExternal(t, quantizedCmd(t), 2, ExternalOptions{Stderr: io.Discard})
	rng := rand.New(rand.NewPCG(11, 12))
	const n = 200
	x := &dataset.Matrix{NRows: n, NCols: 2, Indptr: make([]int64, 1, n+1)}
	y := make([]float64, n)
	for i := range n {
		a, b := rng.NormFloat64(), rng.NormFloat64()
		x.Indices = append(x.Indices, 0, 1)
		x.Values = append(x.Values, float32(a), float32(b))
		x.Indptr = append(x.Indptr, int64(len(x.Indices)))
		y[i] = 1
		if a-0.5*b < 0 {
			y[i] = -1
		}
	}
	all := make([]uint32, n)
	for i := range all {
		all[i] = uint32(i)
	}
	cAll := make([]float64, n)
	loss := func(w []float64) float64 {
		e.Forward(w, x, all, cAll)
		var s float64
		for i, c := range cAll {
			s += math.Log1p(math.Exp(-y[i] * c))
		}
		return s / n
	}
	train := func(mu, lr float64, steps int) (w []float64, zeroDiffs int) {
		w = make([]float64, 2)
		e.Init(w, rng)
		wp, u := make([]float64, 2), make([]float64, 2)
		const batch = 16
		rows := make([]uint32, batch)
		c, ch := make([]float64, batch), make([]float64, batch)
		phi := zoo.Gaussian.Phi(2)
		for range steps {
			for j := range rows {
				rows[j] = uint32(rng.IntN(n))
			}
			zoo.Gaussian.Draw(rng, u)
			zoo.Perturb(wp, w, u, mu)
			e.Forward(w, x, rows, c)
			e.Forward(wp, x, rows, ch)
			var diff float64
			for j, r := range rows {
				diff += math.Log1p(math.Exp(-y[r]*ch[j])) - math.Log1p(math.Exp(-y[r]*c[j]))
			}
			diff /= batch
			if diff == 0 {
				zeroDiffs++
			}
			zoo.AddScaled(w, -lr*zoo.Coef(diff, mu, phi), u)
		}
		return w, zeroDiffs
	}

	w0 := make([]float64, 2)
	e.Init(w0, rng)
	l0 := loss(w0)
	if math.Abs(l0-math.Ln2) > 1e-12 {
		t.Fatalf("initial loss %v, want log 2 (the initial weights quantise to 0)", l0)
	}
	const steps = 1500
	w, _ := train(0.1, 0.5, steps)
	l1 := loss(w)
	t.Logf("mu = 0.1, lr = 0.5, %d steps: loss %.4f -> %.4f, w = %.3f", steps, l0, l1, w)
	if l1 > 0.5*l0 {
		t.Errorf("loss %.4f -> %.4f: the zeroth-order steps did not train the quantised model", l0, l1)
	}
	wTiny, zeros := train(1e-3, 0.5, 300)
	lTiny := loss(wTiny)
	t.Logf("mu = 1e-3: %d of 300 differences exactly 0, loss %.4f", zeros, lTiny)
	if zeros != 300 || lTiny != l0 {
		t.Errorf("mu = 1e-3: %d zero differences, loss %v: expected no signal at all", zeros, lTiny)
	}
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestParseCommand(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  bool
	}{
		{"model", []string{"model"}, false},
		{"  python3  model.py --step 0.1 ", []string{"python3", "model.py", "--step", "0.1"}, false},
		{`'/opt/my models/m' -x`, []string{"/opt/my models/m", "-x"}, false},
		{`"a \"b\" \\ \n" c\ d ''`, []string{`a "b" \ \n`, "c d", ""}, false},
		{`a'b'"c"`, []string{"abc"}, false},
		{"", nil, true},
		{"   ", nil, true},
		{`'open`, nil, true},
		{`"open`, nil, true},
		{`trailing\`, nil, true},
	} {
		got, err := ParseCommand(tc.in)
		if (err != nil) != tc.err || fmt.Sprint(got) != fmt.Sprint(tc.want) || len(got) != len(tc.want) {
			t.Errorf("ParseCommand(%q) = %q, %v; want %q (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// TestExternalCodecInterop checks the codec (msgpack/v5 with our checks) against
// the msgpack library both ways.
func TestExternalCodecInterop(t *testing.T) {
	// Library -> ours, with every integer width, str-typed blobs and
	// unknown keys of every type.
	for _, enc := range []map[string]any{
		{"op": "forward", "seq": uint64(1 << 40), "out": []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{"op": "describe", "seq": int8(3), "version": uint16(1), "in_dim": int32(70000), "out_dim": uint8(200),
			"num_params": int64(1 << 33), "init_scale": float32(0.5), "name": strings.Repeat("n", 40),
			"extra": map[string]any{"a": []any{1, "x", nil, true, 2.5, []byte{1}}}, "neg": -5, "big": int64(-1 << 40)},
		{"op": "init", "seq": 2, "params": string([]byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}), "init_scale": 3},
		{"op": "error", "message": strings.Repeat("e", 70000)},
	} {
		b, err := msgpack.Marshal(enc)
		if err != nil {
			t.Fatal(err)
		}
		var m extMsg
		if err := m.parse(b); err != nil {
			t.Fatalf("%v: %v", enc["op"], err)
		}
		if string(m.op) != enc["op"] {
			t.Errorf("op %q", m.op)
		}
		switch string(m.op) {
		case "forward":
			if m.seq != 1<<40 || len(m.out) != 8 {
				t.Errorf("forward: %+v", m)
			}
		case "describe":
			if m.seq != 3 || m.version != 1 || m.inDim != 70000 || m.outDim != 200 || m.nParams != 1<<33 || m.scale != 0.5 || len(m.name) != 40 {
				t.Errorf("describe: %+v", m)
			}
		case "init":
			if len(m.params) != 8 || math.Float64frombits(binary.LittleEndian.Uint64(m.params)) != 1 || m.scale != 3 {
				t.Errorf("init: %+v", m)
			}
		case "error":
			if len(m.message) != 70000 {
				t.Errorf("error message of %d bytes", len(m.message))
			}
		}
	}
	// Ours -> library.
	for _, n := range []int{0, 5, 300, 70000} {
		b := beginFrame(nil)
		b = mpMap(b, 5)
		b = mpStr(mpStr(b, "op"), strings.Repeat("o", n%100))
		b = mpUint(mpStr(b, "u"), uint64(n)*uint64(n)*uint64(n))
		b = mpFloat(mpStr(b, "f"), 0.25)
		b = mpFloats(mpStr(b, "blob"), make([]float64, n))
		b = mpStr(b, strings.Repeat("k", n))
		b = mpMap(b, 0)
		b = endFrame(b)
		if int(binary.LittleEndian.Uint32(b)) != len(b)-4 {
			t.Fatal("bad length prefix")
		}
		var got map[string]any
		if err := msgpack.Unmarshal(b[4:], &got); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if len(got["blob"].([]byte)) != 8*n || got["f"] != 0.25 || fmt.Sprint(got["u"]) != fmt.Sprint(uint64(n)*uint64(n)*uint64(n)) {
			t.Errorf("n=%d: %v", n, got["u"])
		}
	}
	// Strict decoding.
	for name, b := range map[string][]byte{
		"duplicate": mpUint(mpStr(mpUint(mpStr(mpStr(mpStr(mpMap(nil, 3), "op"), "x"), "seq"), 1), "seq"), 2),
		"trailing":  append(mpStr(mpStr(mpMap(nil, 1), "op"), "x"), 0),
		"no op":     mpUint(mpStr(mpMap(nil, 1), "seq"), 1),
		"not a map": mpStr(nil, "op"),
		"negative":  append(mpStr(mpStr(mpStr(mpMap(nil, 2), "op"), "x"), "seq"), 0xff),
		"seq type":  mpStr(mpStr(mpStr(mpStr(mpMap(nil, 2), "op"), "x"), "seq"), "1"),
		"int key":   append(mpMap(nil, 1), 1, 1),
		"deep":      append(mpStr(mpMap(nil, 1), "x"), bytes.Repeat([]byte{0x91}, 20)...),
		"truncated": mpStr(mpMap(nil, 1), "op")[:3],
		"reserved":  append(mpStr(mpStr(mpStr(mpMap(nil, 2), "op"), "x"), "z"), 0xc1),
		"long map":  binary.BigEndian.AppendUint32([]byte{0xdf}, 1<<30),
	} {
		var m extMsg
		if err := m.parse(b); err == nil || !errors.Is(err, errFrame) {
			t.Errorf("%s: parse = %v", name, err)
		}
	}
}

func TestReadFrame(t *testing.T) {
	var hdr [4]byte
	read := func(s string) ([]byte, int, error) {
		return readFrame(bufio.NewReader(strings.NewReader(s)), &hdr, nil, 100)
	}
	if p, _, err := read("\x02\x00\x00\x00\x80\x00"); err != nil || len(p) != 2 {
		t.Errorf("good frame: %q %v", p, err)
	}
	if _, _, err := read("hello world\n"); !errors.Is(err, errFrame) || !strings.Contains(err.Error(), "1819043176") {
		t.Errorf("text: %v", err)
	}
	if _, _, err := read("\x00\x00\x00\x00"); !errors.Is(err, errFrame) {
		t.Errorf("empty: %v", err)
	}
	if _, _, err := read(""); err != io.EOF {
		t.Errorf("eof: %v", err)
	}
	if _, got, err := read("\x05\x00"); err != io.ErrUnexpectedEOF || got != 2 {
		t.Errorf("short header: %d %v", got, err)
	}
	if _, got, err := read("\x05\x00\x00\x00ab"); err != io.ErrUnexpectedEOF || got != 6 {
		t.Errorf("short payload: %d %v", got, err)
	}
}

// FuzzExternalFrame feeds arbitrary bytes to the frame reader and the
// message decoder: they must return an error or a message whose slices lie
// inside the frame, and never panic or read past the limit.
func FuzzExternalFrame(f *testing.F) {
	f.Add([]byte("hello world\n"))
	f.Add(endFrame(mpStr(mpStr(mpMap(beginFrame(nil), 1), "op"), "forward")))
	good := beginFrame(nil)
	good = mpMap(good, 4)
	good = mpStr(mpStr(good, "op"), "forward")
	good = mpUint(mpStr(good, "seq"), 7)
	good = mpFloats(mpStr(good, "out"), []float64{1, 2})
	good = mpStr(good, "x")
	good = append(good, 0x92, 0xc0, 0xd4, 1, 2)
	f.Add(endFrame(good))
	desc := beginFrame(nil)
	desc = mpMap(desc, 4)
	desc = mpStr(mpStr(desc, "op"), "describe")
	desc = mpFloat(mpStr(desc, "init_scale"), 0.1)
	desc = mpUint(mpStr(desc, "num_params"), 1<<40)
	desc = mpStr(mpStr(desc, "name"), "m")
	f.Add(endFrame(desc))
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 1 << 12
		var hdr [4]byte
		r := bufio.NewReader(bytes.NewReader(data))
		for {
			frame, _, err := readFrame(r, &hdr, nil, limit)
			if err != nil {
				return
			}
			if len(frame) > limit {
				t.Fatalf("frame of %d bytes past the limit", len(frame))
			}
			var m extMsg
			if m.parse(frame) != nil {
				continue
			}
			for _, s := range [][]byte{m.op, m.name, m.init, m.params, m.out, m.message} {
				if len(s) > len(frame) {
					t.Fatal("slice longer than the frame")
				}
			}
		}
	})
}

// BenchmarkExternalForward measures the per-call cost of Forward through
// examples/quantized (d = 16, about 2 non-zeros a row, as
// BenchmarkLinearForward): encoding, two pipe transfers, the child's
// msgpack decoding and compute, decoding. Compare with
// BenchmarkLinearForward for the in-process cost.
func BenchmarkExternalForward(b *testing.B) {
	e, err := StartExternal(context.Background(), quantizedCmd(b), 16, ExternalOptions{Stderr: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("d=16/batch=%d", batch), func(b *testing.B) {
			benchForward(b, e, 0.12, batch)
			if err := e.Err(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// runFakeModel is a model process for the tests, selected by mode: it
// answers like a correct k = 1 model (out = sum of a row's values) except
// for the misbehaviour its mode names.
func runFakeModel(mode string) int {
	in := bufio.NewReader(os.Stdin)
	out := os.Stdout
	var hdr [4]byte
	var frame []byte
	send := func(b []byte) { out.Write(endFrame(b)) }
	for {
		var err error
		frame, _, err = readFrame(in, &hdr, frame, 1<<26)
		if err == io.EOF {
			switch mode {
			case "noexit":
				time.Sleep(time.Hour)
			case "exitfail":
				fmt.Fprintln(os.Stderr, "fake: flush failed")
				return 1
			}
			return 0
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake:", err)
			return 1
		}
		var req struct {
			Op     string `msgpack:"op"`
			Seq    uint64 `msgpack:"seq"`
			InDim  uint64 `msgpack:"in_dim"`
			N      int    `msgpack:"n"`
			Indptr []byte `msgpack:"indptr"`
			Values []byte `msgpack:"values"`
		}
		if err := msgpack.Unmarshal(frame, &req); err != nil {
			fmt.Fprintln(os.Stderr, "fake:", err)
			return 1
		}
		b := beginFrame(nil)
		switch req.Op {
		case "describe":
			switch mode {
			case "exit":
				fmt.Fprintln(os.Stderr, "fake: no such file: weights.bin")
				return 2
			case "nodescribe":
				time.Sleep(time.Hour)
			case "garbage-start":
				fmt.Println("Loading model... done")
				time.Sleep(time.Hour)
			case "describeerror":
				b = mpMap(b, 2)
				b = mpStr(mpStr(b, "op"), "error")
				b = mpStr(mpStr(b, "message"), "cannot load weights.bin")
				send(b)
				continue
			}
			version, inDim, np, init := uint64(1), req.InDim, req.InDim, "zeros"
			switch mode {
			case "version2":
				version = 2
			case "indim":
				inDim++
			case "noparams":
				np = 0
			case "bigparams":
				np = 1 << 40
			case "badinit":
				init = "random"
			case "initbad":
				init = "model"
			}
			b = mpMap(b, 7)
			b = mpStr(mpStr(b, "op"), "describe")
			b = mpUint(mpStr(b, "seq"), req.Seq)
			b = mpUint(mpStr(b, "version"), version)
			b = mpUint(mpStr(b, "in_dim"), inDim)
			b = mpUint(mpStr(b, "out_dim"), 1)
			b = mpUint(mpStr(b, "num_params"), np)
			b = mpStr(mpStr(b, "init"), init)
			send(b)
			if mode == "partial" {
				out.Write([]byte{1, 2}) // the start of the forward answer, which never ends
			}
		case "init":
			b = mpMap(b, 3)
			b = mpStr(mpStr(b, "op"), "init")
			b = mpUint(mpStr(b, "seq"), req.Seq)
			b = mpFloats(mpStr(b, "params"), make([]float64, 3))
			send(b)
		case "forward":
			res := make([]float64, req.N)
			for j := range res {
				lo := binary.LittleEndian.Uint32(req.Indptr[4*j:])
				hi := binary.LittleEndian.Uint32(req.Indptr[4*j+4:])
				for p := lo; p < hi; p++ {
					res[j] += float64(math.Float32frombits(binary.LittleEndian.Uint32(req.Values[4*p:])))
				}
			}
			op, seq := "forward", req.Seq
			switch mode {
			case "crash":
				fmt.Fprintln(os.Stderr, "fake: boom")
				return 3
			case "exitclean":
				return 0
			case "hang":
				fmt.Fprintln(os.Stderr, "fake: hanging")
				time.Sleep(time.Hour)
			case "partial":
				// The two bytes went out after the describe answer:
				// they wait in the pipe, and the timeout cannot come
				// before them however slow this process is.
				time.Sleep(time.Hour)
			case "garbage":
				fmt.Println("hello, this is a debug print")
				time.Sleep(time.Hour)
			case "badmsgpack":
				out.Write([]byte{3, 0, 0, 0, 0x93, 1, 2})
				time.Sleep(time.Hour)
			case "huge":
				out.Write([]byte{0xf0, 0xff, 0xff, 0xff})
				time.Sleep(time.Hour)
			case "wrongcount":
				res = append(res, 0)
			case "nan":
				res[3] = math.NaN()
			case "inf":
				res[0] = math.Inf(1)
			case "wrongseq":
				seq++
			case "wrongop":
				op = "init"
			case "error":
				b = mpMap(b, 3)
				b = mpStr(mpStr(b, "op"), "error")
				b = mpUint(mpStr(b, "seq"), seq)
				b = mpStr(mpStr(b, "message"), "weights exploded")
				send(b)
				continue
			}
			b = mpMap(b, 3)
			b = mpStr(mpStr(b, "op"), op)
			b = mpUint(mpStr(b, "seq"), seq)
			if mode == "oddbytes" {
				b = mpBinHeader(mpStr(b, "out"), 8*len(res)+3)
				b = append(b, make([]byte, 8*len(res)+3)...)
			} else {
				b = mpFloats(mpStr(b, "out"), res)
			}
			send(b)
		default:
			fmt.Fprintln(os.Stderr, "fake: unknown op", req.Op)
			return 1
		}
	}
}
