package converge

import (
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// A cosignature does not sign the witness's name, so a transparency member naming one
// Ed25519 key twice (under two witness names, or as the log's key and a witness's) is a
// bundle error; the twin, two witnesses with keys of their own, parses.
func TestTransparencyNamesOneKeyTwice(t *testing.T) {
	doc := loadVectorFile(t, filepath.Join("..", "vectors", "transparency.json"))
	keys := doc["keys"].(map[string]any)
	logKey, w1, w2 := keys["log"].(string), keys["witness-1"].(string), keys["witness-2"].(string)
	raw := func(vkey string) []byte {
		b, err := base64.StdEncoding.DecodeString(strings.SplitN(vkey, "+", 3)[2])
		if err != nil || len(b) != 33 {
			t.Fatalf("bad test key %q", vkey)
		}
		return b[1:]
	}
	// a cosignature key (type 0x04) of the given raw key under the given name
	vkeyAs := func(name string, key []byte) string {
		return fmt.Sprintf("%s+%08x+%s", name, noteKeyID(name, noteKeyCosignV1, key),
			base64.StdEncoding.EncodeToString(append([]byte{noteKeyCosignV1}, key...)))
	}
	w1Again := vkeyAs("witness.test/witness-1-again", raw(w1))
	logAsWitness := vkeyAs("witness.test/the-log", raw(logKey))
	member := func(vkeys ...string) map[string]any {
		ws := []any{}
		for _, v := range vkeys {
			ws = append(ws, map[string]any{"name": strings.SplitN(v, "+", 2)[0], "vkey": v})
		}
		return map[string]any{"log": logKey, "witnesses": ws}
	}
	const want = "transparency names one key twice (two witnesses, or a witness and the log)"
	for name, m := range map[string]map[string]any{
		"one key under two witness names": member(w1, w1Again),
		"the log's key as a witness's":    member(w2, logAsWitness),
	} {
		_, err := parseLogPolicy(m)
		if ErrorKind(err) != KindBundle || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want a bundle error %q", name, err, want)
		}
	}
	// the twins: each key once (the same built vkeys with their own keys) parses
	p, err := parseLogPolicy(member(w1, w2))
	if err != nil || len(p.Witnesses) != 2 {
		t.Fatalf("two witnesses with their own keys: %v", err)
	}
	if _, err := parseLogPolicy(member(w1Again, w2)); err != nil {
		t.Fatalf("witness-1's key under another name, once: %v", err)
	}
}
