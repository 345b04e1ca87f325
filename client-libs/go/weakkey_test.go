package converge

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
)

func TestWeakKey(t *testing.T) {
	const smallOrder = "an Ed25519 public key of small order"
	const notCanonical = "an Ed25519 public key not in canonical form"
	generated, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	fixed := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public().(ed25519.PublicKey)
	cases := []struct {
		name, hex string
		want      string
	}{
		{"the identity", "01" + strings.Repeat("00", 31), smallOrder},
		{"the identity, sign bit set", "01" + strings.Repeat("00", 30) + "80", smallOrder},
		{"y8", "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", smallOrder},
		{"p + 3", "f0" + strings.Repeat("ff", 30) + "7f", notCanonical},
		// the twins: sound keys are accepted
		{"a generated key", hex.EncodeToString(generated), ""},
		{"the key of the all-zero seed", hex.EncodeToString(fixed), ""},
	}
	for _, c := range cases {
		raw, err := hex.DecodeString(c.hex)
		if err != nil || len(raw) != 32 {
			t.Fatalf("%s: bad test key %q", c.name, c.hex)
		}
		if got := weakKey(raw); got != c.want {
			t.Errorf("%s: weakKey = %q, want %q", c.name, got, c.want)
		}
	}
	if got := weakKey(make([]byte, 31)); got != "an Ed25519 public key has 32 bytes" {
		t.Errorf("31 bytes: weakKey = %q", got)
	}
}

// Why the check exists: crypto/ed25519 accepts R = identity, S = 0 under the identity as a
// signature of any message, and the bundle parser refuses that key (kind "bundle").
func TestWeakKeyRefusedByBundleParser(t *testing.T) {
	identity := make([]byte, 32)
	identity[0] = 1
	sig := make([]byte, 64)
	sig[0] = 1
	if !ed25519.Verify(ed25519.PublicKey(identity), []byte("any message"), sig) {
		t.Log("crypto/ed25519 refuses the identity's forged signature on this toolchain")
	}
	entry := map[string]any{"alg": "ed25519", "key_id": keyIDOf(identity),
		"public_key": b64url(identity), "status": "current"}
	_, err := parseSigningKey(entry)
	if ErrorKind(err) != KindBundle || !strings.Contains(err.Error(), "signing key: an Ed25519 public key of small order") {
		t.Fatalf("the identity as a signing key: %v", err)
	}
	sound := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public().(ed25519.PublicKey)
	entry["key_id"], entry["public_key"] = keyIDOf(sound), b64url(sound)
	if _, err := parseSigningKey(entry); err != nil {
		t.Fatalf("a sound signing key refused: %v", err)
	}
}
