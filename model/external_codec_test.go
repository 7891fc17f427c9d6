package model

// Frame-building helpers of the tests, on the codec's writer: each appends
// one value to b.

func appendWith(b []byte, f func(w *extWriter)) []byte {
	w := newExtWriter()
	w.b = b
	f(w)
	return w.b
}

func mpMap(b []byte, n int) []byte     { return appendWith(b, func(w *extWriter) { w.mapLen(n) }) }
func mpStr(b []byte, s string) []byte  { return appendWith(b, func(w *extWriter) { w.str(s) }) }
func mpUint(b []byte, v uint64) []byte { return appendWith(b, func(w *extWriter) { w.uint(v) }) }
func mpFloat(b []byte, v float64) []byte {
	return appendWith(b, func(w *extWriter) { _ = w.enc.EncodeFloat64(v) })
}
func mpFloats(b []byte, v []float64) []byte { return appendWith(b, func(w *extWriter) { w.floats(v) }) }

// parse decodes frame into m with a fresh reader.
func (m *extMsg) parse(frame []byte) error { return newExtReader().parse(frame, m) }

func mpBinHeader(b []byte, n int) []byte { return appendWith(b, func(w *extWriter) { w.binHeader(n) }) }
