package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (int, []map[string]any, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		lines = append(lines, m)
	}
	return code, lines, errOut.String()
}

func TestInfo(t *testing.T) {
	code, lines, _ := runCLI(t, "info")
	if code != 0 || len(lines) != 1 || lines[0]["language"] != "go" || len(lines[0]["schemas"].([]any)) < 8 {
		t.Fatalf("%d %v", code, lines)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"frobnicate"}, {}, {"check", "--config-dir", "x"}, {"info", "extra"}} {
		if code, lines, stderr := runCLI(t, args...); code != 2 || len(lines) != 0 || !strings.Contains(stderr, "usage") {
			t.Errorf("%v: %d %v", args, code, lines)
		}
	}
}

func TestCheckErrors(t *testing.T) {
	dir := t.TempDir()
	code, lines, _ := runCLI(t, "check", "--config-dir", dir, "127.0.0.1", "443", "AB:CD")
	if code != 2 || lines[0]["error"] != "fingerprint" {
		t.Fatalf("bad fingerprint: %d %v", code, lines)
	}
	fp := "8F:C0:79:E8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2A:F7:1A:EB"
	code, lines, _ = runCLI(t, "check", "--config-dir", dir, "127.0.0.1", "443", fp)
	if code != 2 || lines[0]["error"] != "config" {
		t.Fatalf("no notaries: %d %v", code, lines)
	}
	code, lines, _ = runCLI(t, "check", "--config-dir", filepath.Join(dir, "missing"), "127.0.0.1", "443", fp)
	if code != 2 || lines[0]["error"] != "config" {
		t.Fatalf("missing directory: %d %v", code, lines)
	}
	code, lines, _ = runCLI(t, "check", "--config-dir", dir, "127.0.0.1", "-1", fp)
	if code != 2 || lines[0]["error"] != "usage" {
		t.Fatalf("bad port: %d %v", code, lines)
	}
}

func TestVectorUnsupportedSchema(t *testing.T) {
	f := filepath.Join(t.TempDir(), "x.json")
	os.WriteFile(f, []byte(`{"schema": "converge-vectors/other/1", "tests": []}`), 0o644)
	code, lines, _ := runCLI(t, "vector", f)
	if code != 2 || lines[0]["error"] != "unsupported-schema" {
		t.Fatalf("%d %v", code, lines)
	}
	code, lines, _ = runCLI(t, "vector", filepath.Join("..", "..", "..", "vectors", "cache.json"))
	if code != 0 || len(lines) < 10 || lines[0]["result"] == nil {
		t.Fatalf("%d %v", code, lines)
	}
}

func TestHookFlags(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--path", "no-slash"}, {"--first"}, {"--path"}, {"--frobnicate"}, {"--unhooked-first", "extra"},
	} {
		argv := append(append([]string{"hook", "--config-dir", dir}, args...), "127.0.0.1", "443")
		if code, lines, stderr := runCLI(t, argv...); code != 2 || len(lines) != 0 || !strings.Contains(stderr, "usage") {
			t.Errorf("%v: %d %v", args, code, lines)
		}
	}
	code, lines, _ := runCLI(t, "hook", "--config-dir", dir, "--first", "http://127.0.0.1:1/", "127.0.0.1", "443")
	if code != 2 || len(lines) != 1 || lines[0]["error"] != "usage" {
		t.Fatalf("--first without https: %d %v", code, lines)
	}
	// twin: every flag parsed; the unhooked first request goes to the proxy, which is closed
	code, lines, _ = runCLI(t, "hook", "--config-dir", dir, "--path", "/keep", "--follow-redirects",
		"--first", "https://127.0.0.1:1/", "--unhooked-first", "--proxy", "http://127.0.0.1:1",
		"127.0.0.1", "443")
	if code != 1 || len(lines) != 1 || lines[0]["error"] != "io" ||
		!strings.HasPrefix(lines[0]["message"].(string), "first request: ") ||
		!strings.Contains(lines[0]["message"].(string), "127.0.0.1:1") {
		t.Fatalf("all flags: %d %v", code, lines)
	}
}
