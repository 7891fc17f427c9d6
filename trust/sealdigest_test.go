package trust

import (
	"crypto/ed25519"
	"crypto/sha256"
	"testing"
)

// A sealed state's signature is over the SHA-256 of what it covers, not
// over all of it: Ed25519 hashes what it signs twice (SHA-512), and
// sealing a9a's aggregator checkpoint (1.6 MB) cost more than encoding
// it; the adaptive checkpoint period is 50 times a save's cost (issue 35).
func TestSealSignsDigest(t *testing.T) {
	tr := newTestRun(t, "rs", 1)
	k := tr.keys["party-1"]
	file := SealState(k, "rs", "party-1", make([]byte, 1<<16))
	n := len(file) - ed25519.SignatureSize
	sum := sha256.Sum256(file[:n])
	pub := k.priv.Public().(ed25519.PublicKey)
	if !ed25519.Verify(pub, append([]byte("asyrevel/state/v2\x00"), sum[:]...), file[n:]) {
		t.Fatal("the seal does not sign the digest of the state")
	}
}
