package converge

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// Every shared vector file (client-libs/vectors/*.json) through RunVectorCase, compared the
// way the conformance runner compares (each field the case states).

var comparedFields = []string{"result", "error", "kind", "algorithm", "canonical", "request",
	"signed_bytes", "name", "version", "hosts", "verdict", "extended", "enabled"}

// typeFields: the output fields of a transparency case type beyond the common ones (in the
// other types size and root are inputs).
var typeFields = map[string][]string{"tree": {"root"}, "checkpoint": {"size", "root"}}

func normalise(t *testing.T, v any) any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// vectorDiff lists the fields where actual differs from the case's expectations.
func vectorDiff(t *testing.T, c, actual map[string]any) []string {
	var diff []string
	typ, _ := c["type"].(string)
	for _, f := range append(append([]string{}, comparedFields...), typeFields[typ]...) {
		want, stated := c[f]
		if !stated {
			continue
		}
		if !reflect.DeepEqual(normalise(t, want), normalise(t, actual[f])) {
			diff = append(diff, f)
		}
	}
	return diff
}

func loadVectorFile(t *testing.T, path string) map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func vectorFiles(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join("..", "vectors", "*.json"))
	if err != nil || len(files) < len(VectorSchemas) {
		t.Fatalf("vector files not found (%v, %d files)", err, len(files))
	}
	return files
}

// notaryOnlySchema is the notary signer's canonical JSON: clients never re-serialise.
const notaryOnlySchema = "converge-vectors/canonical-json/1"

// notYetSupported: vector schemas this library does not implement yet (the conformance
// runner lists them as expected failures in clients.toml); a schema it supports must not
// stay here (TestNotYetSupportedIsNotSupported).
var notYetSupported = map[string]bool{}

func TestNotYetSupportedIsNotSupported(t *testing.T) {
	for s := range notYetSupported {
		if SupportsSchema(s) {
			t.Errorf("%s is supported now: run its vectors", s)
		}
	}
}

func TestSharedVectors(t *testing.T) {
	total := 0
	for _, path := range vectorFiles(t) {
		doc := loadVectorFile(t, path)
		schema, _ := doc["schema"].(string)
		if schema == notaryOnlySchema {
			continue
		}
		if notYetSupported[schema] {
			t.Logf("%s: schema %s not implemented yet, not run", filepath.Base(path), schema)
			continue
		}
		t.Run(filepath.Base(path), func(t *testing.T) {
			if !SupportsSchema(schema) {
				t.Fatalf("schema %q not supported", schema)
			}
			tests, _ := doc["tests"].([]any)
			if len(tests) == 0 {
				t.Fatal("no cases")
			}
			for _, x := range tests {
				c := x.(map[string]any)
				out, err := RunVectorCase(doc, c)
				if err != nil {
					t.Errorf("case %v: %v", c["id"], err)
					continue
				}
				if d := vectorDiff(t, c, out); len(d) > 0 {
					t.Errorf("case %v (%v): fields %v differ: got %v", c["id"], c["comment"], d, out)
				}
				total++
			}
		})
	}
	t.Logf("%d vector cases", total)
}

// The comparison itself must catch a wrong output (twin of TestSharedVectors).
func TestVectorComparisonDetectsDifferences(t *testing.T) {
	doc := loadVectorFile(t, filepath.Join("..", "vectors", "fingerprints.json"))
	c := doc["tests"].([]any)[0].(map[string]any)
	out, err := RunVectorCase(doc, c)
	if err != nil {
		t.Fatal(err)
	}
	if d := vectorDiff(t, c, out); len(d) != 0 {
		t.Fatalf("unexpected diff %v", d)
	}
	out["canonical"] = "00"
	if d := vectorDiff(t, c, out); !reflect.DeepEqual(d, []string{"canonical"}) {
		t.Fatalf("a changed canonical form went unnoticed: %v", d)
	}
	if _, err := RunVectorCase(map[string]any{"schema": "converge-vectors/unknown/1"}, c); err == nil {
		t.Fatal("an unknown schema was accepted")
	}
}
