package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/asyrevel/asyrevel/dataset"
)

// DefaultCodes is the largest codebook a party fits per output block when
// the run names none (Codebook's K).
const DefaultCodes = 64

// Codebook is the label-free local model of the defended profile: a
// party's columns are split into k contiguous blocks (dataset.Blocks), and
// each block of a row is coded by the index of its nearest centroid among
// K. The centroids are fitted by k-means on the party's own training rows
// (Fit): no label and no message is needed, so nothing a party sends
// depends on a label. Its k outputs are the codes 0..K-1, as floats; the
// aggregator's Embed head turns each code into a learnt vector.
//
// A code carries at most log2 K bits of the block (6 for the default 64),
// once per sample: less than one float of a trained model's outputs, which
// the zeroth-order algorithms send again at every visit and evaluation.
//
// Layout of w (NumParams = K*d): the centroids block by block, each block
// feature-major, w[lo*K + j*K + c] the value of feature lo+j in centroid c
// of the block [lo, hi), so that a sparse row touches only its non-zero
// features' contiguous K-blocks.
//
// The model owns scratch space for K*k squared centroid norms and K
// distances, and is not safe for concurrent use.
type Codebook struct {
	d, k, codes int
	blocks      []dataset.Block
	norm        []float64 // |centroid|^2, per block and code
	dist        []float64 // distances of the current sample, K
}

var _ Local = (*Codebook)(nil)

// NewCodebook returns a codebook model of d inputs coded in k blocks of
// K codes each. It panics if a dimension is not positive or k > d.
func NewCodebook(d, k, codes int) *Codebook {
	checkDims("NewCodebook", d, k, codes)
	blocks, err := dataset.Blocks(d, k)
	if err != nil {
		panic(fmt.Sprintf("model: NewCodebook: %v", err))
	}
	return &Codebook{d: d, k: k, codes: codes, blocks: blocks,
		norm: make([]float64, k*codes), dist: make([]float64, codes)}
}

// InDim is d.
func (m *Codebook) InDim() int { return m.d }

// OutDim is k.
func (m *Codebook) OutDim() int { return m.k }

// Codes is K, the codes per output.
func (m *Codebook) Codes() int { return m.codes }

// NumParams is K*d.
func (m *Codebook) NumParams() int { return m.codes * m.d }

// Init spreads the centroids of every block at random in [0, 1): a
// codebook is meant to be fitted (Fit) before it is used.
func (m *Codebook) Init(w []float64, rng *rand.Rand) {
	checkLen("Codebook.Init", "w", len(w), m.NumParams())
	for i := range w {
		w[i] = rng.Float64()
	}
}

// norms computes the squared norm of every centroid of w (K*d: little
// against a batch of rows).
func (m *Codebook) norms(w []float64) {
	K := m.codes
	clear(m.norm)
	for b, bl := range m.blocks {
		nb := m.norm[b*K : (b+1)*K]
		for j := bl.Lo; j < bl.Hi; j++ {
			row := w[j*K : (j+1)*K]
			for c, v := range row {
				nb[c] += v * v
			}
		}
	}
}

// Forward writes, for each row r, the code of each block: the index of
// the centroid nearest to the row's block in Euclidean distance (the
// lowest on ties).
func (m *Codebook) Forward(w []float64, x *dataset.Matrix, rows []uint32, out []float64) {
	checkForward("Codebook.Forward", m.d, m.k, m.NumParams(), w, x, rows, out)
	m.norms(w)
	for j, r := range rows {
		idx, val := x.Row(int(r))
		m.code(w, idx, val, out[j*m.k:(j+1)*m.k])
	}
}

// code writes the k codes of one sparse row.
func (m *Codebook) code(w []float64, idx []int32, val []float32, out []float64) {
	K := m.codes
	p := 0
	for b, bl := range m.blocks {
		// |x - c|^2 = |x|^2 - 2 x.c + |c|^2; |x|^2 is the same for every c.
		dist := m.dist
		copy(dist, m.norm[b*K:(b+1)*K])
		for ; p < len(idx) && int(idx[p]) < bl.Hi; p++ {
			v := 2 * float64(val[p])
			row := w[int(idx[p])*K : (int(idx[p])+1)*K]
			for c, cv := range row {
				dist[c] -= v * cv
			}
		}
		best := 0
		for c, v := range dist {
			if v < dist[best] {
				best = c
			}
		}
		out[b] = float64(best)
	}
}

// ErrFit reports a codebook that cannot be fitted to the rows given.
var ErrFit = errors.New("model: codebook fit")

// FitRows is the most rows k-means looks at: a larger training set is
// subsampled (seeded), which changes centroids little and bounds the
// time of a fit (K * d * FitRows per pass).
const FitRows = 10000

// fitWork and maxTries set how many k-means tries a block gets: as many
// as fit in fitWork multiply-adds of one pass each, at most maxTries.
const (
	fitWork  = 1 << 24
	maxTries = 10
)

// fitPasses bounds the Lloyd passes of a fit; it stops earlier once fewer
// than one row in a thousand changes its code.
const fitPasses = 15

// Fit sets the centroids of w by k-means (k-means++ seeding, then Lloyd's
// passes) on the rows of x, at most FitRows of them, chosen with rng. It
// reads no label. A block with fewer distinct rows than K gets them all
// as centroids (and duplicates, never chosen: the lowest index wins a
// tie), so a block of a few categorical columns is coded without loss.
func (m *Codebook) Fit(w []float64, x *dataset.Matrix, rng *rand.Rand) error {
	checkLen("Codebook.Fit", "w", len(w), m.NumParams())
	if x.NCols != m.d {
		panic(fmt.Sprintf("model: Codebook.Fit: matrix has %d columns, model has %d inputs", x.NCols, m.d))
	}
	if x.NRows == 0 {
		return fmt.Errorf("%w: no rows", ErrFit)
	}
	rows := make([]int, x.NRows)
	for i := range rows {
		rows[i] = i
	}
	if len(rows) > FitRows {
		rng.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
		rows = rows[:FitRows]
		slices.Sort(rows)
	}
	for _, bl := range m.blocks {
		sub := x.Rows(rows).Columns(bl.Lo, bl.Hi)
		// k-means finds a local optimum that depends on its seeding: on a
		// small block several tries, the tightest kept, cost little.
		tries := min(max(fitWork/(sub.NRows*m.codes*max(bl.Len(), 1)), 1), maxTries)
		var cent []float64
		best := math.Inf(1)
		for range tries {
			c, inertia := kmeans(sub, m.codes, rng)
			if inertia < best {
				cent, best = c, inertia
			}
		}
		K := m.codes
		for c := range K {
			for j := range bl.Len() {
				w[(bl.Lo+j)*K+c] = cent[c*bl.Len()+j]
			}
		}
	}
	return nil
}

// kmeans returns K centroids (K x d, row-major) of the rows of x and their
// inertia, the sum of the squared distances of the rows to their nearest
// centroid.
func kmeans(x *dataset.Matrix, K int, rng *rand.Rand) ([]float64, float64) {
	n, d := x.NRows, x.NCols
	dense := make([]float64, n*d)
	for i := range n {
		idx, val := x.Row(i)
		for p, j := range idx {
			dense[i*d+int(j)] = float64(val[p])
		}
	}
	row := func(i int) []float64 { return dense[i*d : (i+1)*d] }
	sq := func(a, b []float64) float64 {
		var s float64
		for j, v := range a {
			t := v - b[j]
			s += t * t
		}
		return s
	}
	cent := make([]float64, K*d)
	// k-means++: each next centroid drawn with probability proportional to
	// its squared distance from the nearest chosen one.
	near := make([]float64, n)
	copy(cent[:d], row(rng.IntN(n)))
	for i := range n {
		near[i] = sq(row(i), cent[:d])
	}
	chosen := 1
	for ; chosen < K; chosen++ {
		var total float64
		for _, v := range near {
			total += v
		}
		if total == 0 {
			break // every row coincides with a centroid
		}
		t := rng.Float64() * total
		pick := n - 1
		for i, v := range near {
			if t -= v; t < 0 {
				pick = i
				break
			}
		}
		c := cent[chosen*d : (chosen+1)*d]
		copy(c, row(pick))
		for i := range n {
			near[i] = min(near[i], sq(row(i), c))
		}
	}
	for c := chosen; c < K; c++ {
		copy(cent[c*d:(c+1)*d], cent[:d]) // duplicates: never the lowest index
	}
	assign := make([]int, n)
	for i := range assign {
		assign[i] = -1
	}
	sum := make([]float64, chosen*d)
	cnt := make([]int, chosen)
	var inertia float64
	for range fitPasses {
		changed := 0
		inertia = 0
		for i := range n {
			x := row(i)
			best, bd := 0, math.Inf(1)
			for c := range chosen {
				if v := sq(x, cent[c*d:(c+1)*d]); v < bd {
					best, bd = c, v
				}
			}
			inertia += bd
			if assign[i] != best {
				assign[i] = best
				changed++
			}
		}
		if changed*1000 < n {
			break
		}
		clear(sum)
		clear(cnt)
		for i, c := range assign {
			cnt[c]++
			s := sum[c*d : (c+1)*d]
			for j, v := range row(i) {
				s[j] += v
			}
		}
		for c := range chosen {
			if cnt[c] == 0 {
				continue // keeps its place: a row coincides with it or it is far
			}
			s, cc := sum[c*d:(c+1)*d], cent[c*d:(c+1)*d]
			for j := range cc {
				cc[j] = s[j] / float64(cnt[c])
			}
		}
	}
	return cent, inertia
}
