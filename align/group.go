package align

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/cloudflare/circl/group"
)

// The group is ristretto255 (RFC 9496) from cloudflare/circl, its
// hash-to-group the RFC 9380 suite ristretto255_XMD:SHA-512_R255MAP_RO_.
// No group arithmetic is written here.
var grp = group.Ristretto255

// ElementSize is the size of an encoded group element.
const ElementSize = 32

// ErrElement reports bytes from a peer that are not the canonical encoding
// of a group element, or the identity (which no honest peer sends).
var ErrElement = errors.New("align: not a group element")

// secret is an organisation's ephemeral scalar: drawn at random for one
// alignment, kept in memory only, never written or sent.
type secret struct{ s group.Scalar }

func newSecret() secret { return secret{grp.RandomNonZeroScalar(nil)} }

// workers is how many goroutines share the group arithmetic.
func workers() int { return max(1, runtime.GOMAXPROCS(0)) }

// parallel runs f(lo, hi) over [0, n) in blocks shared by the worker
// pool, and returns the first error.
func parallel(n int, f func(lo, hi int) error) error {
	const block = 256
	w := min(workers(), (n+block-1)/block)
	if w <= 1 {
		if n == 0 {
			return nil
		}
		return f(0, n)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	var stop atomic.Bool
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				lo := int(next.Add(block)) - block
				if lo >= n {
					return
				}
				if err := f(lo, min(lo+block, n)); err != nil {
					once.Do(func() { first = err })
					stop.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// hashMask writes k·H(keys[i]) for each key into dst (ElementSize bytes
// each). dst must hold len(keys) elements.
func (k secret) hashMask(dst []byte, keys []string, dstTag []byte) error {
	return parallel(len(keys), func(lo, hi int) error {
		e := grp.NewElement()
		for i := lo; i < hi; i++ {
			h := grp.HashToElement([]byte(keys[i]), dstTag)
			e.Mul(h, k.s)
			b, err := e.MarshalBinaryCompress()
			if err != nil {
				return fmt.Errorf("align: encoding an element: %w", err)
			}
			copy(dst[i*ElementSize:], b)
		}
		return nil
	})
}

// mask raises each element of src (ElementSize bytes each, from a peer)
// to k and writes the first width bytes of each result's encoding into
// dst. A bad element is an error wrapping ErrElement with its position
// (base + i).
func (k secret) mask(dst, src []byte, width int, base int) error {
	n := len(src) / ElementSize
	return parallel(n, func(lo, hi int) error {
		in, out := grp.NewElement(), grp.NewElement()
		for i := lo; i < hi; i++ {
			if err := in.UnmarshalBinary(src[i*ElementSize : (i+1)*ElementSize]); err != nil {
				return fmt.Errorf("%w: item %d", ErrElement, base+i)
			}
			if in.IsIdentity() {
				return fmt.Errorf("%w: item %d is the identity", ErrElement, base+i)
			}
			out.Mul(in, k.s)
			b, err := out.MarshalBinaryCompress()
			if err != nil {
				return fmt.Errorf("align: encoding an element: %w", err)
			}
			copy(dst[i*width:(i+1)*width], b[:width])
		}
		return nil
	})
}
