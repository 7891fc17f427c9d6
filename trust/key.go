package trust

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/asyrevel/asyrevel/internal/atomicfile"
)

// Key is a participant's secret key: a NATS nkey user key pair (Ed25519).
// Its public key ("U" followed by 55 base32 characters) names the
// participant in the roster and authenticates its broker connection; the
// same key signs its messages and receipts.
type Key struct {
	seed []byte // the encoded nkey seed ("SU...")
	pub  string
	priv ed25519.PrivateKey
}

// GenerateKey makes a new random user key pair.
func GenerateKey() (*Key, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("trust: generate key: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("trust: generate key: %w", err)
	}
	defer wipe(seed)
	return ParseKey(seed)
}

// ParseKey reads a user seed in any form nats.go's nkey options accept: the
// bare seed ("SU..."), alone on a line, or a decorated credentials block.
// It refuses account, operator and server seeds.
func ParseKey(data []byte) (*Key, error) {
	kp, err := nkeys.ParseDecoratedUserNKey(data)
	if err != nil {
		if bytes.Contains(data, []byte("-----BEGIN NATS USER JWT-----")) || bytes.HasPrefix(bytes.TrimSpace(data), []byte("U")) {
			return nil, fmt.Errorf("trust: no user seed found (is this a public key or a JWT?): %w", err)
		}
		return nil, fmt.Errorf("trust: no user seed found: %w", err)
	}
	defer kp.Wipe()
	s, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("trust: seed: %w", err)
	}
	seed := bytes.Clone(s) // kp.Wipe wipes s
	prefix, raw, err := nkeys.DecodeSeed(seed)
	if err != nil || prefix != nkeys.PrefixByteUser {
		wipe(seed)
		return nil, fmt.Errorf("trust: not a user seed")
	}
	pub, err := kp.PublicKey()
	if err != nil {
		wipe(seed)
		wipe(raw)
		return nil, fmt.Errorf("trust: public key: %w", err)
	}
	k := &Key{seed: seed, pub: pub, priv: ed25519.NewKeyFromSeed(raw)}
	wipe(raw)
	return k, nil
}

// PublicKey is the key's public nkey ("U...").
func (k *Key) PublicKey() string { return k.pub }

// Seed is the encoded seed ("SU..."), the secret. The caller must not keep
// or log it.
func (k *Key) Seed() []byte { return bytes.Clone(k.seed) }

// Wipe overwrites the key's secret material; the Key is unusable afterwards.
func (k *Key) Wipe() {
	wipe(k.seed)
	wipe(k.priv)
	k.seed, k.priv = nil, nil
}

// Sign signs msg with the key (Ed25519). It does not allocate.
func (k *Key) Sign(msg []byte) [64]byte {
	if len(k.priv) != ed25519.PrivateKeySize {
		panic("trust: Sign with a wiped key")
	}
	var s [64]byte
	copy(s[:], ed25519.Sign(k.priv, msg))
	return s
}

// NATSOption authenticates a nats.go connection as this key's user (the
// nonce the server sends is signed with the key).
func (k *Key) NATSOption() nats.Option {
	return nats.Nkey(k.pub, func(nonce []byte) ([]byte, error) {
		if len(k.priv) != ed25519.PrivateKeySize {
			return nil, errors.New("trust: key wiped")
		}
		return ed25519.Sign(k.priv, nonce), nil
	})
}

// ParsePublicKey decodes a user public nkey ("U...") into an Ed25519
// public key.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	if !nkeys.IsValidPublicUserKey(s) {
		switch {
		case len(s) > 0 && s[0] == 'S':
			return nil, errors.New("trust: that is a secret seed, not a public key: give the public key (U...) and keep the seed to yourself")
		case nkeys.IsValidPublicKey(s):
			return nil, fmt.Errorf("trust: %q is not a user public key (it should start with U)", clip(s))
		}
		return nil, fmt.Errorf("trust: %q is not a valid user public key", clip(s))
	}
	raw, err := nkeys.Decode(nkeys.PrefixByteUser, []byte(s))
	if err != nil {
		return nil, fmt.Errorf("trust: public key %q: %w", clip(s), err)
	}
	// One text per key: the decoder tolerates trailing characters.
	if enc, err := nkeys.Encode(nkeys.PrefixByteUser, raw); err != nil || string(enc) != s || len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("trust: %q is not a valid user public key", clip(s))
	}
	return ed25519.PublicKey(raw), nil
}

// ErrExists is returned by the file writers when the file exists and
// overwriting was not asked for.
var ErrExists = errors.New("trust: file exists")

// WriteKeyFile writes the key's seed to path with mode 0600, in the
// format nats.NkeyOptionFromSeed reads (the seed alone on one line). It
// refuses to replace an existing file unless force is set.
func WriteKeyFile(path string, k *Key, force bool) error {
	data := append(k.Seed(), '\n')
	defer wipe(data)
	return writeFile(path, data, 0o600, force)
}

// ReadKeyFile reads a seed file written by WriteKeyFile (or any user seed
// file nats.go reads). On Unix it refuses a file that its group or others
// may read or write: a secret that others can read is no longer one.
func ReadKeyFile(path string) (*Key, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("trust: key file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("trust: key file %s is not a regular file", path)
	}
	if runtime.GOOS != "windows" && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("trust: key file %s has mode %04o: others may read the secret; run chmod 600 %s if it is still secret, else make a new key",
			path, st.Mode().Perm(), path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("trust: key file: %w", err)
	}
	defer wipe(data)
	k, err := ParseKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// writeFile writes data to path with mode perm (less the umask): through
// a temporary file and a rename (atomicfile), so a reader never sees half
// a file; without force it fails with ErrExists if path exists.
func writeFile(path string, data []byte, perm fs.FileMode, force bool) error {
	if !force {
		if _, err := os.Lstat(path); err == nil {
			return fmt.Errorf("%w: %s (use --force to replace it)", ErrExists, path)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("trust: %w", err)
		}
	}
	write := atomicfile.Write
	if !force {
		write = atomicfile.WriteNew // fails if path appeared meanwhile
	}
	err := write(path, perm, func(w io.Writer) error { _, err := w.Write(data); return err })
	switch {
	case !force && errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%w: %s (use --force to replace it)", ErrExists, path)
	case err != nil:
		return fmt.Errorf("trust: write %s: %w", path, err)
	}
	return nil
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 0
	}
}
