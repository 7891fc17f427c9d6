package model

import (
	"bufio"
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
	"time"

	"github.com/asyrevel/asyrevel/dataset"
)

// ExternalProtocolVersion is the version of the external-model protocol
// (EXTERNAL.md) this package speaks.
const ExternalProtocolVersion = 1

// Defaults of ExternalOptions.
const (
	DefaultExternalTimeout      = 30 * time.Second
	DefaultExternalStartTimeout = 30 * time.Second
	DefaultExternalCloseTimeout = 2 * time.Second
	DefaultExternalMaxFrame     = 64 << 20
	DefaultExternalInitScale    = 0.01
)

// ErrExternal is wrapped by every error of an External: a model process
// that cannot be started, crashes, hangs, breaks the protocol, reports an
// error or returns non-finite outputs. Timeouts also wrap
// os.ErrDeadlineExceeded.
var ErrExternal = errors.New("model: external model failed")

// Failer is implemented by models whose Forward or Init can fail at run time
// for reasons of the model, not of the caller: External. Such a model
// cannot return the error from Forward (Local has no error result), so it
// records the first one, fills the outputs with NaN and reports it here.
// A caller must check Err after Forward and stop with the error rather than
// publish the outputs.
type Failer interface {
	// Err returns the first error of the model, or nil. Once non-nil it
	// stays the same.
	Err() error
}

// ExternalOptions configures StartExternal. The zero value is usable.
type ExternalOptions struct {
	// Timeout bounds each Forward and each Init call (the request written
	// and the answer read). 0 means DefaultExternalTimeout.
	Timeout time.Duration
	// StartTimeout bounds starting the process and the describe handshake;
	// the ctx of StartExternal can only shorten it. 0 means
	// DefaultExternalStartTimeout.
	StartTimeout time.Duration
	// CloseTimeout is how long Close waits for the process to exit after
	// closing its stdin, before it kills it. 0 means
	// DefaultExternalCloseTimeout.
	CloseTimeout time.Duration
	// MaxFrame bounds the payload of every frame, in both directions.
	// 0 means DefaultExternalMaxFrame (64 MiB).
	MaxFrame int
	// OutDim, if positive, asks the model for this many outputs per sample
	// (the run's k); the model must answer with it. 0 lets the model decide.
	OutDim int
	// Stderr receives the model's stderr, line by line, each line prefixed
	// with StderrPrefix. nil means os.Stderr; use io.Discard to drop it.
	Stderr io.Writer
	// StderrPrefix precedes each stderr line. "" means "[model NAME] ",
	// NAME the base name of the executable.
	StderrPrefix string
	// Env is added to the parent's environment of the process (KEY=VALUE).
	Env []string
	// Dir is the working directory of the process; "" is the parent's.
	Dir string
}

// Initialisation modes a model declares in its describe answer.
const (
	extInitZeros  = "zeros"
	extInitNormal = "normal"
	extInitModel  = "model"
)

// External is a Local whose F(w; x) is computed by a child process that
// speaks the external-model protocol (EXTERNAL.md) over its stdin and
// stdout: any executable in any language, a true black box. Parameters are
// still owned by the caller and sent with every Forward; the process keeps
// no training state.
//
// Errors. Local.Forward and Local.Init cannot return errors, and a
// misbehaving model must not panic the party. So the first failure (the
// process crashed, did not answer within the timeout, wrote something that
// is not a frame, answered with an error frame, returned the wrong number of
// outputs or a non-finite one) is recorded: Forward fills out (Init fills w)
// with NaN, kills the process, and every later call returns NaN at once
// without talking to it. Err returns the recorded error, which wraps
// ErrExternal. Callers must check Err after each Forward (the Failer
// interface) and stop with it; a receiver that validates values for
// finiteness rejects the NaN outputs of a caller that did not.
//
// Programmer errors (len(w) != NumParams(), a matrix whose NCols is not
// InDim(), len(out) != len(rows)*OutDim()) panic, as for every Local.
//
// Forward reuses its buffers and does not allocate once they have grown to
// the largest batch. An External is not safe for concurrent use, except
// that Close, Err, Name and Pid may be called from any goroutine, also
// while a Forward is in flight.
type External struct {
	argv      []string
	name      string
	pid       int
	inDim     int
	outDim    int
	numParams int
	initMode  string
	initScale float64
	maxFrame  int // limit of frames we read
	maxReq    int // limit of frames we write: min(maxFrame, the model's max_frame)
	timeout   time.Duration
	closeWait time.Duration

	cmd     *exec.Cmd
	stdin   *os.File // our write end of the child's stdin
	stdout  *os.File // our read end of the child's stdout
	stderrR *os.File // our read end of the child's stderr
	rd      *bufio.Reader
	exited  chan struct{} // closed when the process has been reaped
	waitErr error         // cmd.Wait's result, valid after exited
	errDone chan struct{} // closed when stderr reached EOF
	tail    stderrTail

	// Call state, touched only by the goroutine calling Forward and Init.
	seq  uint64
	wbuf []byte
	rbuf []byte
	hdr  [4]byte
	msg  extMsg
	w    *extWriter
	r    *extReader

	mu     sync.Mutex
	err    error // first failure, sticky
	closed bool
	killed bool // by us

	closeOnce sync.Once
	closeErr  error
}

var (
	_ Local  = (*External)(nil)
	_ Failer = (*External)(nil)
)

// StartExternal starts the model process argv[0] with arguments argv[1:]
// and performs the describe handshake with the party's input dimension
// inDim. ctx bounds the start-up only (process start and handshake, together
// with opts.StartTimeout); cancelling it later has no effect: use Close.
// On any error the process is killed and reaped before StartExternal
// returns.
func StartExternal(ctx context.Context, argv []string, inDim int, opts ExternalOptions) (*External, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("%w: empty model command", ErrExternal)
	}
	if inDim <= 0 {
		return nil, fmt.Errorf("%w: input dimension %d, want > 0", ErrExternal, inDim)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: starting %q: %w", ErrExternal, argv[0], err)
	}
	o := opts
	if o.Timeout <= 0 {
		o.Timeout = DefaultExternalTimeout
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultExternalStartTimeout
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = DefaultExternalCloseTimeout
	}
	if o.MaxFrame <= 0 {
		o.MaxFrame = DefaultExternalMaxFrame
	}
	o.MaxFrame = int(min(uint64(o.MaxFrame), 1<<31-1)) // fits a uint32 prefix and any int
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	base := filepath.Base(argv[0])
	if o.StderrPrefix == "" {
		o.StderrPrefix = "[model " + base + "] "
	}

	e := &External{
		argv:      append([]string(nil), argv...),
		name:      base,
		inDim:     inDim,
		maxFrame:  o.MaxFrame,
		maxReq:    o.MaxFrame,
		timeout:   o.Timeout,
		closeWait: o.CloseTimeout,
		exited:    make(chan struct{}),
		w:         newExtWriter(),
		r:         newExtReader(),
		errDone:   make(chan struct{}),
	}
	if err := e.start(&o); err != nil {
		return nil, err
	}

	deadline := time.Now().Add(o.StartTimeout)
	ctxDeadline := false
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline, ctxDeadline = d, true
	}
	stop := context.AfterFunc(ctx, func() {
		past := time.Unix(1, 0)
		e.stdout.SetReadDeadline(past)
		e.stdin.SetWriteDeadline(past)
	})
	err := e.describe(deadline, time.Until(deadline), o.OutDim)
	stop()
	if err != nil {
		cerr := ctx.Err()
		if cerr == nil && ctxDeadline && !time.Now().Before(deadline) {
			// The pipe deadline may fire before ctx notices its own.
			cerr = context.DeadlineExceeded
		}
		if cerr != nil {
			err = fmt.Errorf("%w: %s: describe: start-up interrupted: %w", ErrExternal, e.label(), cerr)
		}
		e.fail(err)
		e.Close()
		return nil, err
	}
	return e, nil
}

// start creates the pipes and starts the process.
func (e *External) start(o *ExternalOptions) (err error) {
	var files []*os.File // closed on failure, and the child's ends always
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	pipe := func() (r, w *os.File) {
		if err != nil {
			return nil, nil
		}
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w
	}
	inR, inW := pipe()
	outR, outW := pipe()
	errR, errW := pipe()
	if err != nil {
		return fmt.Errorf("%w: starting %q: %v", ErrExternal, e.argv[0], err)
	}
	// Timeouts rely on deadlines, which need pollable pipes (all Unix
	// systems).
	if err := outR.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("%w: starting %q: pipes without deadlines, timeouts impossible: %v", ErrExternal, e.argv[0], err)
	}
	if err := inW.SetWriteDeadline(time.Time{}); err != nil {
		return fmt.Errorf("%w: starting %q: pipes without deadlines, timeouts impossible: %v", ErrExternal, e.argv[0], err)
	}

	cmd := exec.Command(e.argv[0], e.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.Dir = o.Dir
	if len(o.Env) > 0 {
		cmd.Env = append(os.Environ(), o.Env...)
	}
	setProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%w: starting %q: %v", ErrExternal, e.argv[0], err)
	}
	// The child holds its ends now; ours are closed by the deferred loop.
	files = []*os.File{inR, outW, errW}
	e.cmd, e.pid = cmd, cmd.Process.Pid
	e.stdin, e.stdout, e.stderrR = inW, outR, errR
	e.rd = bufio.NewReaderSize(outR, 64<<10)
	go func() {
		e.waitErr = cmd.Wait()
		close(e.exited)
	}()
	go e.pumpStderr(errR, o.Stderr, o.StderrPrefix)
	return nil
}

// describe performs the handshake and checks the model's answer.
func (e *External) describe(deadline time.Time, limit time.Duration, outDim int) error {
	const op = "describe"
	w := e.w.begin(e.wbuf)
	n := 5
	if outDim > 0 {
		n++
	}
	w.mapLen(n)
	w.key("op").str(op)
	e.seq++
	w.key("seq").uint(e.seq)
	w.key("version").uint(ExternalProtocolVersion)
	w.key("in_dim").uint(uint64(e.inDim))
	w.key("max_frame").uint(uint64(e.maxFrame))
	if outDim > 0 {
		w.key("out_dim").uint(uint64(outDim))
	}
	e.wbuf = w.end()
	if err := e.roundTrip(op, deadline, limit); err != nil {
		return err
	}
	m := &e.msg
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: describe: %s", ErrExternal, e.label(), fmt.Sprintf(format, args...))
	}
	switch {
	case m.version != ExternalProtocolVersion:
		return bad("the model speaks protocol version %d, the party version %d", m.version, ExternalProtocolVersion)
	case m.inDim != uint64(e.inDim):
		return bad("the model answers in_dim %d, the party's data has %d features", m.inDim, e.inDim)
	case m.outDim == 0 || m.outDim > 1<<16:
		return bad("out_dim %d, want 1..65536", m.outDim)
	case outDim > 0 && m.outDim != uint64(outDim):
		return bad("the model has out_dim %d, the run needs %d", m.outDim, outDim)
	case m.nParams == 0:
		return bad("num_params is 0 or missing")
	}
	if m.maxFrm > 0 {
		if m.maxFrm < 1024 {
			return bad("max_frame %d is below the minimum of 1024", m.maxFrm)
		}
		e.maxReq = int(min(m.maxFrm, uint64(e.maxFrame)))
	}
	if m.nParams > uint64(e.maxReq-64)/8 {
		return bad("num_params %d does not fit in a frame of %d bytes", m.nParams, e.maxReq)
	}
	e.outDim, e.numParams = int(m.outDim), int(m.nParams)
	switch string(m.init) {
	case "", extInitZeros:
		e.initMode = extInitZeros
	case extInitNormal, extInitModel:
		e.initMode = string(m.init)
	default:
		return bad("init %q, want %q, %q or %q", m.init, extInitZeros, extInitNormal, extInitModel)
	}
	e.initScale = DefaultExternalInitScale
	if m.hasScl {
		if !(m.scale >= 0) || math.IsInf(m.scale, 0) {
			return bad("init_scale %v, want a finite number >= 0", m.scale)
		}
		e.initScale = m.scale
	}
	if len(m.name) > 0 {
		e.name = sanitizeName(m.name, 48)
	}
	return nil
}

// sanitizeName keeps printable ASCII of s, at most n bytes.
func sanitizeName(s []byte, n int) string {
	var b strings.Builder
	for _, c := range s {
		if b.Len() == n {
			break
		}
		if c > ' ' && c < 0x7f {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// InDim is the number of input features given to StartExternal.
func (e *External) InDim() int { return e.inDim }

// OutDim is the number of outputs per sample the model declared.
func (e *External) OutDim() int { return e.outDim }

// NumParams is the number of parameters the model declared.
func (e *External) NumParams() int { return e.numParams }

// Name is "external:" followed by the name the model declared (at most 57
// bytes in all); the party reports it as its model kind.
func (e *External) Name() string { return "external:" + e.name }

// Pid is the process id of the model process.
func (e *External) Pid() int { return e.pid }

// Err returns the first failure of the model (wrapping ErrExternal), or nil.
func (e *External) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Init writes initial parameters into w, as the model declared in its
// describe answer: zeros; small Gaussian values (scale init_scale) drawn
// from rng; or values the model computes from a seed drawn from rng. rng
// may be nil, which stands for a fixed seed. On failure w is filled with NaN
// and Err reports why.
func (e *External) Init(w []float64, rng *rand.Rand) {
	checkLen("External.Init", "w", len(w), e.numParams)
	if rng == nil {
		rng = rand.New(rand.NewPCG(0, 0))
	}
	switch e.initMode {
	case extInitNormal:
		for i := range w {
			w[i] = e.initScale * rng.NormFloat64()
		}
		return
	case extInitModel:
	default:
		clear(w)
		return
	}
	if e.usable() != nil {
		fillNaN(w)
		return
	}
	if err := e.initByModel(rng.Uint64(), w); err != nil {
		e.fail(err)
		fillNaN(w)
	}
}

func (e *External) initByModel(seed uint64, w []float64) error {
	const op = "init"
	b := e.w.begin(e.wbuf)
	b.mapLen(3)
	b.key("op").str(op)
	e.seq++
	b.key("seq").uint(e.seq)
	b.key("seed").uint(seed)
	e.wbuf = b.end()
	if err := e.roundTrip(op, time.Now().Add(e.timeout), e.timeout); err != nil {
		return err
	}
	return e.decodeFloats(op, "params", e.msg.params, w)
}

// Forward writes F(w; x_r) for each r in rows into out, computed by the
// model process. On failure out is filled with NaN and Err reports why; see
// External.
func (e *External) Forward(w []float64, x *dataset.Matrix, rows []uint32, out []float64) {
	checkForward("External.Forward", e.inDim, e.outDim, e.numParams, w, x, rows, out)
	if len(rows) == 0 {
		return
	}
	if e.usable() != nil {
		fillNaN(out)
		return
	}
	if err := e.forward(w, x, rows, out); err != nil {
		e.fail(err)
		fillNaN(out)
	}
}

func (e *External) forward(w []float64, x *dataset.Matrix, rows []uint32, out []float64) error {
	const op = "forward"
	nnz := 0
	for _, r := range rows {
		nnz += int(x.Indptr[r+1] - x.Indptr[r])
	}
	// 96 bytes cover the map, its keys and the integers.
	size := 96 + 8*len(w) + 4*(len(rows)+1) + 8*nnz
	if size > e.maxReq {
		return fmt.Errorf("%w: %s: forward: a batch of %d rows with %d non-zeros needs a frame of about %d bytes, above the limit of %d (lower the batch or chunk size, or raise MaxFrame)",
			ErrExternal, e.label(), len(rows), nnz, size, e.maxReq)
	}
	b := e.w.begin(e.wbuf)
	b.grow(size)
	b.mapLen(7)
	b.key("op").str(op)
	e.seq++
	b.key("seq").uint(e.seq)
	b.key("n").uint(uint64(len(rows)))
	b.key("params").floats(w)
	b.key("indptr").binHeader(4 * (len(rows) + 1))
	b.uint32LE(0)
	p := uint32(0)
	for _, r := range rows {
		p += uint32(x.Indptr[r+1] - x.Indptr[r])
		b.uint32LE(p)
	}
	b.key("indices").binHeader(4 * nnz)
	for _, r := range rows {
		idx, _ := x.Row(int(r))
		for _, c := range idx {
			b.uint32LE(uint32(c))
		}
	}
	b.key("values").binHeader(4 * nnz)
	for _, r := range rows {
		_, val := x.Row(int(r))
		for _, v := range val {
			b.uint32LE(math.Float32bits(v))
		}
	}
	e.wbuf = b.end()
	if err := e.roundTrip(op, time.Now().Add(e.timeout), e.timeout); err != nil {
		return err
	}
	return e.decodeFloats(op, "out", e.msg.out, out)
}

// decodeFloats decodes a little-endian float64 blob of exactly len(dst)
// finite values into dst.
func (e *External) decodeFloats(op, key string, blob []byte, dst []float64) error {
	if len(blob) != 8*len(dst) {
		what := fmt.Sprintf("%d values", len(blob)/8)
		if len(blob)%8 != 0 {
			what = fmt.Sprintf("%d bytes (not a whole number of float64)", len(blob))
		}
		want := fmt.Sprintf("%d", len(dst))
		if op == "forward" {
			want = fmt.Sprintf("%d (%d rows x out_dim %d)", len(dst), len(dst)/e.outDim, e.outDim)
		}
		return fmt.Errorf("%w: %s: %s: %q has %s, want %s", ErrExternal, e.label(), op, key, what, want)
	}
	for i := range dst {
		v := math.Float64frombits(binary.LittleEndian.Uint64(blob[8*i:]))
		if math.IsNaN(v) || math.IsInf(v, 0) {
			where := fmt.Sprintf("value %d", i)
			if op == "forward" {
				where = fmt.Sprintf("output %d of row %d", i%e.outDim, i/e.outDim)
			}
			return fmt.Errorf("%w: %s: %s: %s is %v (outputs must be finite)", ErrExternal, e.label(), op, where, v)
		}
		dst[i] = v
	}
	return nil
}

// roundTrip writes the request in e.wbuf and reads and parses the answer
// into e.msg, checking its op and seq. An error frame becomes an error.
func (e *External) roundTrip(op string, deadline time.Time, limit time.Duration) error {
	e.stdin.SetWriteDeadline(deadline)
	e.stdout.SetReadDeadline(deadline)
	if _, err := e.stdin.Write(e.wbuf); err != nil {
		return e.ioError(op, "writing the request", limit, err, 0)
	}
	frame, got, err := readFrame(e.rd, &e.hdr, e.rbuf, e.maxFrame)
	e.rbuf = frame[:0]
	if err != nil {
		if errors.Is(err, errFrame) {
			// A bad length prefix: show it and what follows.
			peek, _ := e.rd.Peek(min(e.rd.Buffered(), 28))
			return e.garbage(op, err, peek)
		}
		return e.ioError(op, "waiting for the answer", limit, err, got)
	}
	m := &e.msg
	if err := e.r.parse(frame, m); err != nil {
		return e.garbage(op, err, frame[:min(len(frame), 28)])
	}
	if string(m.op) == "error" {
		msg := string(m.message)
		if len(msg) > 2000 {
			msg = msg[:2000] + "..."
		}
		if msg == "" {
			msg = "(no message)"
		}
		return fmt.Errorf("%w: %s: %s: the model reported an error: %s", ErrExternal, e.label(), op, msg)
	}
	if string(m.op) != op {
		return fmt.Errorf("%w: %s: %s: answer has op %q, want %q or \"error\"", ErrExternal, e.label(), op, sanitizeName(m.op, 32), op)
	}
	if !m.hasSeq || m.seq != e.seq {
		return fmt.Errorf("%w: %s: %s: answer has seq %d, want %d (answers must echo the request's seq)", ErrExternal, e.label(), op, m.seq, e.seq)
	}
	return nil
}

// garbage reports an answer that is not a frame of the protocol; after is
// what followed the length prefix.
func (e *External) garbage(op string, cause error, after []byte) error {
	snippet := append(append([]byte(nil), e.hdr[:]...), after...)
	return fmt.Errorf("%w: %s: %s: the model's stdout is not a frame of the protocol: %w (stdout began %q; models must write only frames to stdout and their logs to stderr)%s",
		ErrExternal, e.label(), op, cause, snippet, e.stderrNote(0))
}

// ioError explains a failed read or write on the model's pipes.
func (e *External) ioError(op, stage string, limit time.Duration, err error, got int) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		partial := ""
		if got > 0 {
			partial = fmt.Sprintf("; it wrote only %d bytes of a frame", got)
		}
		return fmt.Errorf("%w: %s: %s: no answer within %v while %s%s: the model hangs or is too slow (raise the timeout): %w%s",
			ErrExternal, e.label(), op, limit.Round(time.Millisecond), stage, partial, os.ErrDeadlineExceeded, e.stderrNote(0))
	}
	if e.isClosed() {
		return fmt.Errorf("%w: %s: %s: closed while %s", ErrExternal, e.label(), op, stage)
	}
	// EOF or a broken pipe: the process has most likely exited. Wait a
	// little for its status and the rest of its stderr (a few seconds:
	// on a busy host the exit is reaped late, and the error would lose
	// the status and the stderr that explain it).
	select {
	case <-e.exited:
		return fmt.Errorf("%w: %s: %s: the model exited (%s) while the party was %s%s",
			ErrExternal, e.label(), op, exitText(e.waitErr), stage, e.stderrNote(2*time.Second))
	case <-time.After(5 * time.Second):
	}
	return fmt.Errorf("%w: %s: %s: %s: %v (the model closed its stdout or stdin but is still running)%s",
		ErrExternal, e.label(), op, stage, err, e.stderrNote(0))
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// stderrNote returns "; last stderr: ..." with the model's last stderr
// lines, waiting up to wait for stderr to reach EOF first.
func (e *External) stderrNote(wait time.Duration) string {
	if wait > 0 {
		select {
		case <-e.errDone:
		case <-time.After(wait):
		}
	}
	t := e.tail.String()
	if t == "" {
		return ""
	}
	return "; last stderr: " + t
}

// label names the model in errors.
func (e *External) label() string {
	return fmt.Sprintf("%q (pid %d)", e.name, e.pid)
}

// usable returns the recorded error, recording one first if the model was
// closed.
func (e *External) usable() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil && e.closed {
		e.err = fmt.Errorf("%w: %s: used after Close", ErrExternal, e.label())
	}
	return e.err
}

func (e *External) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// fail records err if it is the first failure and kills the process: a
// model that failed once is not trusted again.
func (e *External) fail(err error) {
	e.mu.Lock()
	if e.err == nil {
		e.err = err
	}
	e.mu.Unlock()
	e.kill()
}

// kill kills the process (and its process group where supported) unless it
// has already been reaped.
func (e *External) kill() {
	select {
	case <-e.exited:
		return
	default:
	}
	e.mu.Lock()
	e.killed = true
	e.mu.Unlock()
	killProcess(e.cmd)
}

// Close closes the model's stdin, which asks it to exit, waits up to the
// close timeout for it, kills it if it is still running (at once if it has
// failed), and reaps it. It returns an error if a model that had not failed
// exited with a non-zero status or had to be killed; the failure of a model
// that had failed is reported by Err, not by Close. Close is idempotent and
// safe to call concurrently with Forward, which then fails.
func (e *External) Close() error {
	e.closeOnce.Do(func() { e.closeErr = e.shutdown() })
	return e.closeErr
}

func (e *External) shutdown() error {
	e.mu.Lock()
	e.closed = true
	failed := e.err != nil
	e.mu.Unlock()
	e.stdin.Close()
	if failed {
		e.kill()
	}
	select {
	case <-e.exited:
	case <-time.After(e.closeWait):
		e.kill()
	}
	reaped := true
	select {
	case <-e.exited:
	case <-time.After(5 * time.Second): // a process stuck in the kernel
		reaped = false
	}
	e.stdout.Close()
	select {
	case <-e.errDone:
	case <-time.After(time.Second):
		// Something else (a grandchild outside the process group) holds
		// the pipe: stop reading it.
		e.stderrR.Close()
	}
	e.mu.Lock()
	killed := e.killed
	e.mu.Unlock()
	switch {
	case failed:
		return nil
	case !reaped:
		return fmt.Errorf("%w: %s: close: the process could not be reaped", ErrExternal, e.label())
	case killed:
		return fmt.Errorf("%w: %s: close: the model did not exit within %v of its stdin closing and was killed", ErrExternal, e.label(), e.closeWait)
	case e.waitErr != nil:
		return fmt.Errorf("%w: %s: close: the model exited with %v%s", ErrExternal, e.label(), e.waitErr, e.stderrNote(0))
	}
	return nil
}

// pumpStderr copies the model's stderr to w line by line with a prefix, and
// keeps its tail for error messages.
func (e *External) pumpStderr(r *os.File, w io.Writer, prefix string) {
	defer close(e.errDone)
	br := bufio.NewReaderSize(r, 4096)
	line := make([]byte, 0, len(prefix)+4096+1)
	for {
		s, err := br.ReadSlice('\n')
		if len(s) > 0 {
			e.tail.add(s)
			line = append(append(line[:0], prefix...), s...)
			if line[len(line)-1] != '\n' {
				line = append(line, '\n')
			}
			w.Write(line)
		}
		if err != nil && err != bufio.ErrBufferFull {
			r.Close()
			return
		}
	}
}

// stderrTail keeps the last bytes of the model's stderr.
type stderrTail struct {
	mu  sync.Mutex
	buf []byte
}

const stderrTailMax = 1024

func (t *stderrTail) add(s []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, s...)
	if len(t.buf) > 2*stderrTailMax {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-stderrTailMax:]...)
	}
}

// String returns the last lines, at most stderrTailMax bytes, quoted.
func (t *stderrTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if len(s) > stderrTailMax {
		s = s[len(s)-stderrTailMax:]
		if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
			s = s[i+1:]
		}
	}
	if s == "" {
		return ""
	}
	return fmt.Sprintf("%q", s)
}

func fillNaN(v []float64) {
	nan := math.NaN()
	for i := range v {
		v[i] = nan
	}
}

// ParseCommand splits a command line such as the value of a --model-cmd
// flag into arguments, as a POSIX shell splits words but without any
// expansion: blanks separate words, single quotes keep everything literally,
// double quotes keep everything but \" \\ \$ and \` escapes, and a backslash
// outside quotes escapes the next character.
func ParseCommand(s string) ([]string, error) {
	var (
		args  []string
		cur   strings.Builder
		inArg bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		case c == '\\':
			if i+1 == len(s) {
				return nil, errors.New("model: command ends with a backslash")
			}
			i++
			cur.WriteByte(s[i])
			inArg = true
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("model: unterminated single quote in command")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inArg = true
		case c == '"':
			inArg = true
			closed := false
			for i++; i < len(s); i++ {
				if s[i] == '"' {
					closed = true
					break
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if !closed {
				return nil, errors.New("model: unterminated double quote in command")
			}
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if inArg {
		args = append(args, cur.String())
	}
	if len(args) == 0 {
		return nil, errors.New("model: empty command")
	}
	return args, nil
}
