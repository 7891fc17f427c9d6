package serve_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/serve"
	"github.com/asyrevel/asyrevel/trust"
)

// resign changes party 2's model (parameters x -5) and signs it with a
// key of the attacker's own: the file's own signature verifies.
func resign(t *testing.T, models string) {
	t.Helper()
	path := filepath.Join(models, serve.FileName(2))
	f, err := serve.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range f.Params {
		f.Params[i] *= -5
	}
	k, err := trust.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sign(k); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(models); err != nil {
		t.Fatal(err)
	}
}

// A model re-signed with another key is refused when the keys folder is
// not beside the models: before, it was accepted without a word (the
// accuracy fell from 84% to 40% in the trial).
func TestResignedModelRefusedWithoutRoster(t *testing.T) {
	dir := t.TempDir()
	data, models := fixture(t, dir, true)
	resign(t, models)
	// The keys live elsewhere (the label holder's vault), not beside.
	if err := os.Rename(filepath.Join(dir, "keys"), filepath.Join(t.TempDir(), "keys")); err != nil {
		t.Fatal(err)
	}
	m, err := serve.Predict(context.Background(), serve.PredictConfig{Models: models, Data: data, Net: serve.NetConfig{Bus: "memory"}, Log: zerolog.Nop()})
	if err == nil {
		t.Fatalf("a re-signed model without its roster was accepted (accuracy %.4f)", m.Accuracy)
	}
	if !strings.Contains(err.Error(), "--roster") || !strings.Contains(err.Error(), "--trust-unsigned") {
		t.Errorf("the refusal does not name the fix: %v", err)
	}
}

// The roster decides: a re-signed model is refused with the wrong roster
// and with the right one, the genuine models are accepted with the right
// one, and --trust-unsigned accepts the re-signed one, saying so at Warn.
func TestModelRoster(t *testing.T) {
	dir := t.TempDir()
	data, models := fixture(t, dir, true)
	vault := filepath.Join(t.TempDir(), "keys")
	if err := os.Rename(filepath.Join(dir, "keys"), vault); err != nil {
		t.Fatal(err)
	}
	right := filepath.Join(vault, "roster.json")
	other, _, err := trust.GenerateRun(testRun, 2)
	if err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(t.TempDir(), "roster.json")
	if err := other.WriteFile(wrong, false); err != nil {
		t.Fatal(err)
	}
	predict := func(roster string, trustUnsigned bool, log zerolog.Logger) (*serve.Metrics, error) {
		return serve.Predict(context.Background(), serve.PredictConfig{Models: models, Data: data, Roster: roster, TrustUnsigned: trustUnsigned,
			Net: serve.NetConfig{Bus: "memory"}, Log: log})
	}
	m, err := predict(right, false, zerolog.Nop())
	if err != nil || !m.ModelsChecked {
		t.Fatalf("the genuine models with the right roster: %v", err)
	}
	genuine := m.Accuracy
	if _, err := predict("", false, zerolog.Nop()); !errors.Is(err, serve.ErrNoRoster) {
		t.Errorf("genuine models without a roster: %v, want ErrNoRoster", err)
	}
	if _, err := predict(wrong, false, zerolog.Nop()); !errors.Is(err, serve.ErrSignature) {
		t.Errorf("genuine models with the wrong roster: %v, want ErrSignature", err)
	}
	resign(t, models)
	for _, tc := range []struct {
		name, roster string
		want         error
	}{{"no roster", "", serve.ErrNoRoster}, {"wrong roster", wrong, serve.ErrSignature}, {"right roster", right, serve.ErrSignature}} {
		if m, err := predict(tc.roster, false, zerolog.Nop()); !errors.Is(err, tc.want) {
			t.Errorf("re-signed, %s: %v (metrics %+v), want %v", tc.name, err, m, tc.want)
		}
	}
	// The keys folder given explicitly is a roster too.
	if _, err := serve.Predict(context.Background(), serve.PredictConfig{Models: models, Data: data, Keys: vault, Net: serve.NetConfig{Bus: "memory"}, Log: zerolog.Nop()}); !errors.Is(err, serve.ErrSignature) {
		t.Errorf("re-signed, --keys: %v, want ErrSignature", err)
	}
	var logs bytes.Buffer
	m, err = predict("", true, zerolog.New(&logs))
	if err != nil || m.ModelsChecked {
		t.Fatalf("--trust-unsigned: %v, %+v", err, m)
	}
	if !strings.Contains(logs.String(), `"level":"warn"`) || !strings.Contains(logs.String(), "NOT checked") {
		t.Errorf("--trust-unsigned accepted the models quietly: %q", logs.String())
	}
	if m.Accuracy == genuine {
		t.Logf("the re-signed model scores as the genuine one (%.4f): the fixture is too small to tell", genuine)
	}
}
