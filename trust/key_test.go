package trust

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "party-1.nk")
	if err := WriteKeyFile(path, k, false); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o, want 600", st.Mode().Perm())
	}
	back, err := ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.PublicKey() != k.PublicKey() || !bytes.Equal(back.Seed(), k.Seed()) {
		t.Fatal("key changed on the way through the file")
	}
	// nats.go reads the same file and authenticates as the same user.
	if _, err := nats.NkeyOptionFromSeed(path); err != nil {
		t.Fatalf("nats.go cannot read the seed file: %v", err)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(mustRead(t, path))
	if err != nil {
		t.Fatal(err)
	}
	if pub, _ := kp.PublicKey(); pub != k.PublicKey() {
		t.Fatalf("nkeys reads public key %s, want %s", pub, k.PublicKey())
	}
	// Our signatures are nkeys signatures.
	msg := []byte("nonce")
	sig := k.Sign(msg)
	want, _ := kp.Sign(msg)
	if !bytes.Equal(sig[:], want) {
		t.Fatal("Key.Sign differs from nkeys' signature")
	}
	if err := kp.Verify(msg, sig[:]); err != nil {
		t.Fatal(err)
	}

	// Existing files are not replaced without force.
	k2, _ := GenerateKey()
	if err := WriteKeyFile(path, k2, false); !errors.Is(err, ErrExists) {
		t.Fatalf("overwrite without force: %v", err)
	}
	if err := WriteKeyFile(path, k2, true); err != nil {
		t.Fatal(err)
	}
	if back, _ := ReadKeyFile(path); back.PublicKey() != k2.PublicKey() {
		t.Fatal("force did not replace the key")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
}

func TestReadKeyFileRefusesLoosePermissions(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	path := filepath.Join(t.TempDir(), "k.nk")
	k, _ := GenerateKey()
	if err := WriteKeyFile(path, k, false); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
		os.Chmod(path, mode)
		if _, err := ReadKeyFile(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %o: %v", mode, err)
		}
	}
	os.Chmod(path, 0o400)
	if _, err := ReadKeyFile(path); err != nil {
		t.Errorf("mode 400: %v", err)
	}
}

func TestParseKeyRejects(t *testing.T) {
	acc, _ := nkeys.CreateAccount()
	accSeed, _ := acc.Seed()
	user, _ := GenerateKey()
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"garbage", []byte("hello\nworld\n")},
		{"public key", []byte(user.PublicKey() + "\n")},
		{"account seed", accSeed},
		{"truncated seed", user.Seed()[:40]},
		{"corrupted seed", append([]byte("SUX"), user.Seed()[3:]...)},
	} {
		if _, err := ParseKey(tc.data); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	// A seed with leading blanks is refused, as nats.go refuses it.
	if _, err := ParseKey(append([]byte("  "), user.Seed()...)); err == nil {
		t.Error("indented seed accepted")
	}
	if _, err := ParseKey(append(user.Seed(), '\n')); err != nil {
		t.Errorf("seed with a newline: %v", err)
	}
}

func TestParsePublicKey(t *testing.T) {
	k, _ := GenerateKey()
	pub, err := ParsePublicKey(k.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	sig := k.Sign([]byte("m"))
	if !ed25519.Verify(pub, []byte("m"), sig[:]) {
		t.Fatal("public key does not verify the key's signature")
	}
	acc, _ := nkeys.CreateAccount()
	accPub, _ := acc.PublicKey()
	for _, bad := range []string{"", "U", accPub, string(k.Seed()), k.PublicKey()[:55], k.PublicKey() + "A"} {
		_, err := ParsePublicKey(bad)
		if err == nil {
			t.Errorf("%q accepted", bad)
		}
		if err != nil && strings.Contains(err.Error(), string(k.Seed())) {
			t.Errorf("error message leaks the seed: %v", err)
		}
	}
}

func TestWipe(t *testing.T) {
	k, _ := GenerateKey()
	k.Wipe()
	defer func() {
		if recover() == nil {
			t.Fatal("Sign with a wiped key did not panic")
		}
	}()
	k.Sign([]byte("x"))
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
