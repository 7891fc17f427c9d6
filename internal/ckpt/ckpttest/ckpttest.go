package ckpttest

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/asyrevel/asyrevel/internal/ckpt"
)

// Legacy reads the checkpoint file at path, written by the build before
// the envelope, checks that it is bare (no envelope), and decodes it.
func Legacy[C any](t testing.TB, path string, decode func(io.Reader) (C, error)) C {
	t.Helper()
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.HasPrefix(old, []byte(ckpt.Magic)) {
		t.Fatalf("%s has the envelope: it must be the earlier bare format", path)
	}
	ck, err := decode(bytes.NewReader(old))
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

// Encoded is c's checkpoint file, checked to decode.
func Encoded[C any](t testing.TB, c interface{ Encode(io.Writer) error }, decode func(io.Reader) (C, error)) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := decode(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Damaged is a checkpoint file spoiled in one way (Name) and the error of
// package ckpt its refusal must wrap.
type Damaged struct {
	Name string
	Data []byte
	Want error
}

// Refused checks that decode refuses each damaged file with an error
// wrapping both resume (the role's ErrResume) and the case's Want.
func Refused[C any](t testing.TB, decode func(io.Reader) (C, error), resume error, cases ...Damaged) {
	t.Helper()
	for _, tc := range cases {
		_, err := decode(bytes.NewReader(tc.Data))
		if !errors.Is(err, resume) || !errors.Is(err, tc.Want) {
			t.Errorf("%s: %v, want %v", tc.Name, err, tc.Want)
		}
	}
}
