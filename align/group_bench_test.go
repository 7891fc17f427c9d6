package align

import (
	"strconv"
	"testing"

	"github.com/cloudflare/circl/group"
)

func BenchmarkHashToGroup(b *testing.B) {
	g := group.Ristretto255
	dst := []byte("bench")
	var k [16]byte
	for i := 0; b.Loop(); i++ {
		key := strconv.AppendInt(k[:0], int64(i), 10)
		_ = g.HashToElement(key, dst)
	}
}

func BenchmarkScalarMult(b *testing.B) {
	g := group.Ristretto255
	s := g.RandomNonZeroScalar(nil)
	e := g.HashToElement([]byte("x"), []byte("bench"))
	out := g.NewElement()
	for b.Loop() {
		out.Mul(e, s)
	}
}

func BenchmarkEncode(b *testing.B) {
	g := group.Ristretto255
	e := g.HashToElement([]byte("x"), []byte("bench"))
	for b.Loop() {
		_, _ = e.MarshalBinaryCompress()
	}
}

func BenchmarkDecode(b *testing.B) {
	g := group.Ristretto255
	e := g.HashToElement([]byte("x"), []byte("bench"))
	enc, _ := e.MarshalBinaryCompress()
	out := g.NewElement()
	for b.Loop() {
		_ = out.UnmarshalBinary(enc)
	}
}
