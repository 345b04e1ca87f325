package converge

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFingerprintBounds(t *testing.T) {
	fp := "8F:C0:79:E8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2A:F7:1A:EB"
	pad := strings.Repeat(" ", MaxFingerprintText-len(fp))
	if _, err := ParseFingerprint(pad + fp); err != nil {
		t.Fatalf("200 characters refused: %v", err)
	}
	if _, err := ParseFingerprint(" " + pad + fp); ErrorKind(err) != KindFingerprint {
		t.Fatalf("201 characters accepted: %v", err)
	}
	got, err := ParseFingerprint(strings.ToLower(strings.ReplaceAll(fp, ":", "")))
	if err != nil || got.ColonHex() != fp || got.Algorithm != "sha1" {
		t.Fatalf("plain lower case: %v %v", got, err)
	}
	if _, err := ParseFingerprint(fp + ":"); err == nil {
		t.Fatal("trailing colon accepted")
	}
}

func TestBoundsScan(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n-1) + "{}" + strings.Repeat("]", n-1) }
	// each accepted text has a refused twin one step beyond the bound
	for _, pair := range [][2]string{
		{deep(32), deep(33)},
		{`{"a": 999999999999999}`, `{"a": 9999999999999999}`},
		{`[-1, 0]`, `[-01]`},
		{`["1.5", "1e5", "\"[[[", "\\"]`, `[1.5]`},
		{`{"a": "]]]]"}`, `{"a": 1e5}`},
		{`[0]`, `[-0.0]`},
		{`[0]`, `[1E2]`},
	} {
		if err := boundsScan([]byte(pair[0])); err != nil {
			t.Errorf("%.40s refused: %v", pair[0], err)
		}
		if err := boundsScan([]byte(pair[1])); err == nil {
			t.Errorf("%.40s accepted", pair[1])
		}
	}
	if err := boundsScan([]byte(`["` + strings.Repeat("9", 5000) + `"]`)); err != nil {
		t.Errorf("digits inside a string refused: %v", err)
	}
}

func TestDecodeJSONIsStrict(t *testing.T) {
	v, err := decodeObject([]byte(`{"a": 1, "b": ["x"], "a": 2}`))
	if err != nil || v["a"] != json.Number("2") {
		t.Fatalf("the last repeated name must count: %v %v", v, err)
	}
	if _, err := decodeObject([]byte(" {\"a\": \"\u00e9\"}\n")); err != nil {
		t.Fatalf("white space around the text refused: %v", err)
	}
	for _, bad := range []string{`{"a": 1,}`, `[01]`, "\"a\tb\"", `{"a" 1}`, `1.`, "\xff", ` [1] x`,
		`[NaN]`, `[Infinity]`, `{1: 2}`, `{"a": 1} // c`, `/* c */ {}`, "[\"\xed\xa0\x80\"]", `{"a":1}` + "\x00", `[1]`} {
		if _, err := decodeObject([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestSettledAgreesWithBruteForce(t *testing.T) {
	votes := []Vote{VoteSuccess, VoteFailure, VoteUnreachable}
	var rec func(prefix []Vote, n int, f func([]Vote))
	rec = func(prefix []Vote, n int, f func([]Vote)) {
		if n == 0 {
			f(prefix)
			return
		}
		for _, v := range votes {
			rec(append(append([]Vote{}, prefix...), v), n-1, f)
		}
	}
	checked := 0
	for _, p := range []Policy{Consensus, Majority, Minority} {
		for _, sa := range []bool{true, false} {
			for known := 0; known <= 3; known++ {
				for pending := 0; pending <= 3; pending++ {
					rec(nil, known, func(have []Vote) {
						outcomes := map[bool]bool{}
						rec(nil, pending, func(rest []Vote) {
							v, _ := Decide(p, append(append([]Vote{}, have...), rest...), sa)
							outcomes[v] = true
						})
						v, ok, err := Settled(p, have, pending, sa)
						if err != nil || ok != (len(outcomes) == 1) || (ok && !outcomes[v]) {
							t.Fatalf("%s sa=%v %v pending %d: settled=%v,%v brute=%v", p, sa, have, pending, v, ok, outcomes)
						}
						checked++
					})
				}
			}
		}
	}
	if ok, _ := Decide(Minority, nil, true); ok {
		t.Fatal("nobody asked is trusted")
	}
	if _, err := Decide(Majority, []Vote{"maybe"}, true); err == nil {
		t.Fatal("unknown vote accepted")
	}
	t.Logf("%d vote sets", checked)
}

func TestConfigDiscoveryOrder(t *testing.T) {
	explicit, envDir, xdg := t.TempDir(), t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(xdg, "converge"), 0o755)
	env := map[string]string{ConfigEnvVar: envDir, "XDG_CONFIG_HOME": xdg}
	get := func(k string) string { return env[k] }
	if d, err := DiscoverConfigDir(explicit, get); err != nil || d != explicit {
		t.Fatalf("explicit: %s %v", d, err)
	}
	if d, err := DiscoverConfigDir("", get); err != nil || d != envDir {
		t.Fatalf("env: %s %v", d, err)
	}
	delete(env, ConfigEnvVar)
	if d, err := DiscoverConfigDir("", get); err != nil || d != filepath.Join(xdg, "converge") {
		t.Fatalf("xdg: %s %v", d, err)
	}
	env[ConfigEnvVar] = filepath.Join(envDir, "missing")
	if _, err := DiscoverConfigDir("", get); ErrorKind(err) != KindConfig {
		t.Fatalf("a missing $%s was not an error: %v", ConfigEnvVar, err)
	}
	if _, err := DiscoverConfigDir(filepath.Join(explicit, "missing"), get); ErrorKind(err) != KindConfig {
		t.Fatal("a missing explicit directory was not an error")
	}
}

func TestConfigKeys(t *testing.T) {
	d := writeConfig(t, map[string]any{"notary-agreement": "Consensus", "quorum": 2,
		"cache-lifetime": nil, "extended": "fallback", "max-skew": 60, "userdb": "/tmp/u.sqlite3"})
	c, err := LoadConfig(d)
	if err != nil {
		t.Fatal(err)
	}
	if c.Agreement != Consensus || c.Quorum != 2 || c.CacheLifetime != nil || c.Extended != ExtendedFallback ||
		c.MaxSkew != 60 || c.DB != filepath.Join(d, "cache.sqlite3") || c.UserDB != "/tmp/u.sqlite3" ||
		c.EarlyReturn || c.ConnectTimeout != 2 {
		t.Fatalf("%+v", c)
	}
	for _, bad := range []map[string]any{
		{"unknown-key": 1}, {"quorum": 0}, {"quorum": 17}, {"quorum": json.Number("2.0")}, {"quorum": true},
		{"notary-agreement": "most"}, {"stand-aside": "yes"}, {"connect-timeout": 0},
		{"bounce-port": 65536}, {"extended": "always"}, {"max-skew": 86401}, {"db": ""},
		{"max-response-bytes": 1023},
	} {
		if _, err := LoadConfig(writeConfig(t, bad)); ErrorKind(err) != KindConfig {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

func TestListNotariesEnabledBySymlinkOnly(t *testing.T) {
	cert := makeCert(t, 0, "notary-a.test")
	n := &fakeNotary{cert: cert}
	_ = n
	b := `{"version": 1, "name": "Org %s", "hosts": [{"host": "127.0.0.1", "ssl_port": 1, "http_port": 2, "certificate": ` + jsonStr(cert.pem) + `}]}`
	d := writeConfig(t, nil, strings.Replace(b, "%s", "A", 1), strings.Replace(b, "%s", "A", 1))
	// a third bundle, available but not enabled, and a fourth placed in notaries-enabled/
	os.WriteFile(filepath.Join(d, "notaries-available", "09.notary"), []byte(strings.Replace(b, "%s", "C", 1)), 0o644)
	os.WriteFile(filepath.Join(d, "notaries-enabled", "10.notary"), []byte(strings.Replace(b, "%s", "D", 1)), 0o644)
	files, err := ListNotaries(d)
	if err != nil || len(files) != 4 {
		t.Fatalf("%v %v", files, err)
	}
	if !files[0].Enabled || !files[1].Enabled || files[2].Enabled || !files[3].Enabled {
		t.Fatalf("enabled flags wrong: %+v", files)
	}
	c, _ := LoadConfig(d)
	ns, err := c.Notaries()
	if err != nil || len(ns) != 2 || ns[0].Name != "Org A" || ns[1].Name != "Org D" {
		t.Fatalf("dedup by name: %v %v", ns, err)
	}
	os.WriteFile(filepath.Join(d, "notaries-available", "11.notary"), []byte("{"), 0o644)
	if _, err := ListNotaries(d); ErrorKind(err) != KindBundle {
		t.Fatalf("a broken bundle was not a bundle error: %v", err)
	}
}

func TestConnectHeadAndReply(t *testing.T) {
	dests := []NotaryHost{{Host: "a.test"}, {Host: "b.test"}}
	if got := string(ConnectHead(dests, 4242)); got != "CONNECT a.test:4242 HTTP/1.1\r\nHost: a.test\r\nX-Convergence-Notary: b.test+4242\r\n\r\n" {
		t.Fatalf("%q", got)
	}
	h, err := ParseConnectReply([]byte("HTTP/1.0 200 Connection Established\r\nProxy-Agent: Convergence\r\nX-Convergence-Notary: B.test\r\n\r\n"), dests)
	if err != nil || h.Host != "b.test" {
		t.Fatalf("%v %v", h, err)
	}
	for _, bad := range []string{"HTTP/1.0 403 Access Denied\r\n\r\n", "HTTP/1.0 200 OK\r\nX-Convergence-Notary: c.test\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\n", "SSH-2.0\r\n\r\n"} {
		if _, err := ParseConnectReply([]byte(bad), dests); ErrorKind(err) != KindUnreachable {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestResponseBounds(t *testing.T) {
	body := strings.Repeat("x", 2000)
	raw := []byte("HTTP/1.0 200 OK\r\nContent-Length: 2000\r\n\r\n" + body)
	if _, err := ParseHTTPResponse(raw, len(raw)); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	if _, err := ParseHTTPResponse(raw, len(raw)-1); ErrorKind(err) != KindResponse {
		t.Fatalf("one past the limit: %v", err)
	}
	if _, err := ParseHTTPResponse([]byte("HTTP/1.0 200 OK\r\nContent-Length: 2001\r\n\r\n"+body), 1<<20); ErrorKind(err) != KindResponse {
		t.Fatal("truncated body accepted")
	}
	if _, err := ParseHTTPResponse([]byte("HTTP/1.0 200 OK\r\nContent-Length: 0000000000002\r\n\r\n{}"), 1<<20); ErrorKind(err) != KindResponse {
		t.Fatal("a Content-Length of 13 digits accepted")
	}
	if _, err := ParseHTTPResponse([]byte("HTTP/1.0 200 OK\r\nContent-Length: 000000000002\r\n\r\n{}"), 1<<20); err != nil {
		t.Fatalf("a Content-Length of 12 digits refused: %v", err)
	}
	if _, err := ParseHTTPResponse([]byte("HTTP/1.0 200 OK\r\nContent-Length: \xb3\r\n\r\n{}"), 1<<20); ErrorKind(err) != KindResponse {
		t.Fatal("a superscript digit accepted as Content-Length")
	}
}

func TestCacheDecisionMilliseconds(t *testing.T) {
	life := 10.0
	ts := int64(1_700_000_000_000)
	if CacheDecision(&ts, 1_700_000_005, &life) != "hit" {
		t.Fatal("milliseconds not recognised")
	}
	if CacheDecision(&ts, 1_700_000_011, &life) != "stale" {
		t.Fatal("stale entry hit")
	}
	if CacheDecision(nil, 0, nil) != "miss" {
		t.Fatal("no entry")
	}
}
