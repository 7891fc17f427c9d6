package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"os"

	"github.com/vmihailenco/msgpack/v5"
)

const (
	protocolVersion = 1
	maxFrame        = 64 << 20
)

// request is the union of the fields of the party's requests.
type request struct {
	Op      string `msgpack:"op"`
	Seq     uint64 `msgpack:"seq"`
	Version int    `msgpack:"version"`
	InDim   int    `msgpack:"in_dim"`
	OutDim  int    `msgpack:"out_dim"`
	Seed    uint64 `msgpack:"seed"`
	N       int    `msgpack:"n"`
	Params  []byte `msgpack:"params"`
	Indptr  []byte `msgpack:"indptr"`
	Indices []byte `msgpack:"indices"`
	Values  []byte `msgpack:"values"`
}

type describeAnswer struct {
	Op        string  `msgpack:"op"`
	Seq       uint64  `msgpack:"seq"`
	Version   int     `msgpack:"version"`
	Name      string  `msgpack:"name"`
	InDim     int     `msgpack:"in_dim"`
	OutDim    int     `msgpack:"out_dim"`
	NumParams int     `msgpack:"num_params"`
	Init      string  `msgpack:"init"`
	InitScale float64 `msgpack:"init_scale,omitempty"`
}

type initAnswer struct {
	Op     string `msgpack:"op"`
	Seq    uint64 `msgpack:"seq"`
	Params []byte `msgpack:"params"`
}

type forwardAnswer struct {
	Op  string `msgpack:"op"`
	Seq uint64 `msgpack:"seq"`
	Out []byte `msgpack:"out"`
}

type errorAnswer struct {
	Op      string `msgpack:"op"`
	Seq     uint64 `msgpack:"seq"`
	Message string `msgpack:"message"`
}

type model struct {
	step, clip float64
	k          int    // outputs per sample; 0 until describe
	init       string // zeros, normal or model
	d          int
	qw         []float64 // quantised weights of the current request
	out        []byte
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("quantized: ")
	m := &model{}
	flag.Float64Var(&m.step, "step", 1.0/16, "quantisation step s of the weights")
	flag.Float64Var(&m.clip, "clip", 4, "outputs are clipped to [-clip, clip]")
	flag.IntVar(&m.k, "k", 0, "outputs per sample; 0: what the party asks for, else 1")
	flag.StringVar(&m.init, "init", "model", "initial parameters: model (small random values from the party's seed), zeros or normal (the party draws them)")
	flag.Parse()
	if !(m.step > 0) || !(m.clip > 0) || m.k < 0 {
		log.Fatal("need -step > 0, -clip > 0 and -k >= 0")
	}
	if m.init != "model" && m.init != "zeros" && m.init != "normal" {
		log.Fatalf("-init %q: want model, zeros or normal", m.init)
	}
	if err := serve(m, bufio.NewReader(os.Stdin), bufio.NewWriter(os.Stdout)); err != nil {
		log.Fatal(err)
	}
}

// serve answers requests until stdin ends.
func serve(m *model, in *bufio.Reader, out *bufio.Writer) error {
	var frame []byte
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(in, hdr[:]); err != nil {
			if err == io.EOF {
				return nil // the party closed our stdin: exit cleanly
			}
			return err
		}
		n := binary.LittleEndian.Uint32(hdr[:])
		if n == 0 || n > maxFrame {
			return fmt.Errorf("frame of %d bytes", n)
		}
		if cap(frame) < int(n) {
			frame = make([]byte, n)
		}
		frame = frame[:n]
		if _, err := io.ReadFull(in, frame); err != nil {
			return err
		}
		var req request
		var answer any
		if err := msgpack.Unmarshal(frame, &req); err != nil {
			answer = errorAnswer{"error", 0, "cannot decode the request: " + err.Error()}
		} else if a, err := m.handle(&req); err != nil {
			answer = errorAnswer{"error", req.Seq, err.Error()}
		} else {
			answer = a
		}
		b, err := msgpack.Marshal(answer)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint32(hdr[:], uint32(len(b)))
		out.Write(hdr[:])
		out.Write(b)
		if err := out.Flush(); err != nil {
			return err
		}
	}
}

func (m *model) handle(r *request) (any, error) {
	switch r.Op {
	case "describe":
		if r.Version != protocolVersion {
			return nil, fmt.Errorf("protocol version %d, this model speaks %d", r.Version, protocolVersion)
		}
		if r.InDim <= 0 {
			return nil, fmt.Errorf("in_dim %d", r.InDim)
		}
		switch {
		case m.k > 0 && r.OutDim > 0 && r.OutDim != m.k:
			return nil, fmt.Errorf("started with -k %d, the party needs out_dim %d", m.k, r.OutDim)
		case m.k == 0 && r.OutDim > 0:
			m.k = r.OutDim
		case m.k == 0:
			m.k = 1
		}
		m.d = r.InDim
		log.Printf("ready: in_dim=%d out_dim=%d step=%g clip=%g", m.d, m.k, m.step, m.clip)
		return describeAnswer{Op: "describe", Seq: r.Seq, Version: protocolVersion, Name: "quantized",
			InDim: m.d, OutDim: m.k, NumParams: m.d * m.k, Init: m.init}, nil
	case "init":
		if m.d == 0 {
			return nil, errors.New("init before describe")
		}
		// Small values, all of which quantise to 0: the model starts at
		// F = 0, like a zero-initialised linear model.
		rng := rand.New(rand.NewPCG(r.Seed, 0x51))
		w := make([]byte, 0, 8*m.d*m.k)
		for range m.d * m.k {
			w = binary.LittleEndian.AppendUint64(w, math.Float64bits(0.01*(2*rng.Float64()-1)))
		}
		return initAnswer{"init", r.Seq, w}, nil
	case "forward":
		if m.d == 0 {
			return nil, errors.New("forward before describe")
		}
		out, err := m.forward(r)
		if err != nil {
			return nil, err
		}
		return forwardAnswer{"forward", r.Seq, out}, nil
	}
	return nil, fmt.Errorf("unknown op %q", r.Op)
}

// forward computes clip(q(w)^T x) for the n rows of the request.
func (m *model) forward(r *request) ([]byte, error) {
	k, np := m.k, m.d*m.k
	n := r.N
	switch {
	case len(r.Params) != 8*np:
		return nil, fmt.Errorf("params of %d bytes, want %d", len(r.Params), 8*np)
	case n <= 0 || len(r.Indptr) != 4*(n+1):
		return nil, fmt.Errorf("indptr of %d bytes for n = %d", len(r.Indptr), n)
	case len(r.Indices) != len(r.Values) || len(r.Indices)%4 != 0:
		return nil, fmt.Errorf("indices (%d bytes) and values (%d bytes) disagree", len(r.Indices), len(r.Values))
	}
	if cap(m.qw) < np {
		m.qw = make([]float64, np)
	}
	qw := m.qw[:np]
	for i := range qw {
		w := math.Float64frombits(binary.LittleEndian.Uint64(r.Params[8*i:]))
		qw[i] = m.step * math.Round(w/m.step)
	}
	nnz := uint32(len(r.Indices) / 4)
	out := m.out[:0]
	z := make([]float64, k)
	lo := binary.LittleEndian.Uint32(r.Indptr)
	if lo != 0 {
		return nil, errors.New("indptr[0] != 0")
	}
	for j := range n {
		hi := binary.LittleEndian.Uint32(r.Indptr[4*(j+1):])
		if hi < lo || hi > nnz {
			return nil, fmt.Errorf("indptr[%d] = %d out of order or range", j+1, hi)
		}
		clear(z)
		for p := lo; p < hi; p++ {
			c := binary.LittleEndian.Uint32(r.Indices[4*p:])
			if int(c) >= m.d {
				return nil, fmt.Errorf("column %d out of range [0,%d)", c, m.d)
			}
			v := float64(math.Float32frombits(binary.LittleEndian.Uint32(r.Values[4*p:])))
			for o := range z {
				z[o] += qw[int(c)*k+o] * v
			}
		}
		for _, s := range z {
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(max(-m.clip, min(m.clip, s))))
		}
		lo = hi
	}
	if lo != nnz {
		return nil, fmt.Errorf("indptr[n] = %d, %d non-zeros sent", lo, nnz)
	}
	m.out = out
	return out, nil
}
