package converge

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Loopback tests: real TLS on 127.0.0.1 against notary-like servers (helpers_test.go).

type world struct {
	genuine, forged testCert
	notaries        []*fakeNotary
	targetPort      int
}

// newWorld starts n notaries that all see the genuine certificate at 127.0.0.1:<target>.
func newWorld(t *testing.T, n int, extended bool) *world {
	t.Helper()
	w := &world{genuine: makeCert(t, 0, "target.test", "127.0.0.1"), forged: makeCert(t, 1, "target.test", "127.0.0.1")}
	w.targetPort = targetServer(t, w.genuine)
	for i := 0; i < n; i++ {
		nc := makeCert(t, 2+i%2, fmt.Sprintf("notary-%d.test", i))
		fn := startNotary(t, "127.0.0.1:0", nc)
		fn.extended = extended
		fn.sees(w.loc(), w.genuine.der)
		w.notaries = append(w.notaries, fn)
	}
	return w
}

func (w *world) loc() string { return fmt.Sprintf("127.0.0.1:%d", w.targetPort) }

func (w *world) bundles() []string {
	var out []string
	for i, n := range w.notaries {
		out = append(out, n.bundle(fmt.Sprintf("Org %c", 'A'+i), "127.0.0.1", 1))
	}
	return out
}

func (w *world) client(t *testing.T, settings map[string]any, bundles ...string) *Client {
	t.Helper()
	if bundles == nil {
		bundles = w.bundles()
	}
	c, err := NewClient(writeConfig(t, settings, bundles...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (w *world) check(t *testing.T, c *Client, cert testCert) Verdict {
	t.Helper()
	v, err := c.Check(context.Background(), "127.0.0.1", w.targetPort, FingerprintOf(cert.der, "sha1").ColonHex())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func kinds(v Verdict) string {
	var s []string
	for _, r := range v.Results {
		s = append(s, string(r.Vote)+"/"+r.Kind)
	}
	return strings.Join(s, " ")
}

func TestGenuineTrustedAndCached(t *testing.T) {
	w := newWorld(t, 3, false)
	c := w.client(t, map[string]any{"cache-lifetime": 3600})
	v := w.check(t, c, w.genuine)
	if !v.Trusted || v.FromCache || kinds(v) != "success/listed success/listed success/listed" {
		t.Fatalf("%v %s", v.Trusted, kinds(v))
	}
	if v.Results[0].Protocol != LegacyFormat || v.Results[0].Status != 200 {
		t.Fatalf("%+v", v.Results[0])
	}
	before := w.notaries[0].requests
	v2, err := c.Check(context.Background(), "127.0.0.1", w.targetPort, strings.ToLower(FingerprintOf(w.genuine.der, "sha1").ColonHex()))
	if err != nil || !v2.Trusted || !v2.FromCache || len(v2.Results) != 0 || w.notaries[0].requests != before {
		t.Fatalf("second check not a cache hit: %+v %v", v2, err)
	}
}

func TestForgedNotTrustedNotCached(t *testing.T) {
	w := newWorld(t, 3, false)
	c := w.client(t, map[string]any{"cache-lifetime": 3600})
	for i := 0; i < 2; i++ {
		v := w.check(t, c, w.forged)
		if v.Trusted || v.FromCache || kinds(v) != "failure/mismatch failure/mismatch failure/mismatch" {
			t.Fatalf("round %d: %v %s", i, v.Trusted, kinds(v))
		}
	}
}

func TestSHA256StatusOnly(t *testing.T) {
	w := newWorld(t, 2, false)
	c := w.client(t, nil)
	v, err := c.Check(context.Background(), "127.0.0.1", w.targetPort, FingerprintOf(w.genuine.der, "sha256").ColonHex())
	if err != nil || !v.Trusted || kinds(v) != "success/status-only success/status-only" {
		t.Fatalf("%v %s %v", v.Trusted, kinds(v), err)
	}
}

func TestDeadNotaryStandsAside(t *testing.T) {
	w := newWorld(t, 2, false)
	dead := strings.Replace(w.notaries[0].bundle("Org Dead", "127.0.0.1", 1),
		fmt.Sprintf(`"ssl_port":%d`, w.notaries[0].port()), fmt.Sprintf(`"ssl_port":%d`, deadPort(t)), 1)
	bs := append(w.bundles(), dead)
	v := w.check(t, w.client(t, map[string]any{"notary-agreement": "consensus"}, bs...), w.genuine)
	if !v.Trusted || kinds(v) != "success/listed success/listed unreachable/unreachable" {
		t.Fatalf("stand-aside: %v %s", v.Trusted, kinds(v))
	}
	if v.Results[2].Protocol != LegacyFormat {
		t.Fatalf("a notary that failed before answering reports the format it was asked in: %q", v.Results[2].Protocol)
	}
	v = w.check(t, w.client(t, map[string]any{"notary-agreement": "consensus", "stand-aside": false}, bs...), w.genuine)
	if v.Trusted {
		t.Fatal("an unreachable notary did not count as a failure with stand-aside off")
	}
}

func TestPinMismatchIsAFailure(t *testing.T) {
	w := newWorld(t, 3, false)
	bs := w.bundles()
	// the third bundle pins the first notary's certificate
	bs[2] = strings.Replace(bs[2], jsonStr(w.notaries[2].cert.pem), jsonStr(w.notaries[0].cert.pem), 1)
	v := w.check(t, w.client(t, map[string]any{"notary-agreement": "consensus"}, bs...), w.genuine)
	if v.Trusted || kinds(v) != "success/listed success/listed failure/pin" {
		t.Fatalf("%v %s", v.Trusted, kinds(v))
	}
	if w.notaries[2].requests != 0 {
		t.Fatal("the request was sent to a notary whose pin did not match")
	}
	v = w.check(t, w.client(t, nil, bs...), w.genuine)
	if !v.Trusted {
		t.Fatal("two of three is a majority")
	}
}

func TestBadSignatureIsAFailure(t *testing.T) {
	w := newWorld(t, 3, false)
	w.notaries[1].signKey = testKey(t, 0) // not the key of its certificate
	v := w.check(t, w.client(t, map[string]any{"notary-agreement": "consensus"}), w.genuine)
	if v.Trusted || kinds(v) != "success/listed failure/signature success/listed" {
		t.Fatalf("%v %s", v.Trusted, kinds(v))
	}
}

func TestEarlyReturnSkipsTheSlowNotary(t *testing.T) {
	w := newWorld(t, 3, false)
	w.notaries[2].delay = 1500 * time.Millisecond
	t0 := time.Now()
	v := w.check(t, w.client(t, map[string]any{"early-return": true}), w.genuine)
	if !v.Trusted || kinds(v) != "success/listed success/listed skipped/settled" || time.Since(t0) > time.Second {
		t.Fatalf("%v %s after %s", v.Trusted, kinds(v), time.Since(t0))
	}
	t0 = time.Now()
	v = w.check(t, w.client(t, map[string]any{"early-return": false}), w.genuine)
	if !v.Trusted || kinds(v) != "success/listed success/listed success/listed" || time.Since(t0) < 1400*time.Millisecond {
		t.Fatalf("without early return: %v %s after %s", v.Trusted, kinds(v), time.Since(t0))
	}
}

func TestTotalTimeoutBoundsASilentNotary(t *testing.T) {
	w := newWorld(t, 2, false)
	w.notaries[1].silent = true
	t0 := time.Now()
	v := w.check(t, w.client(t, map[string]any{"total-timeout": 0.5, "notary-timeout": 5}), w.genuine)
	el := time.Since(t0)
	if !v.Trusted || kinds(v) != "success/listed unreachable/timeout" || el > 1500*time.Millisecond {
		t.Fatalf("%v %s after %s", v.Trusted, kinds(v), el)
	}
	t0 = time.Now()
	v = w.check(t, w.client(t, map[string]any{"total-timeout": 5, "notary-timeout": 0.3}), w.genuine)
	if kinds(v) != "success/listed unreachable/timeout" || time.Since(t0) > 1500*time.Millisecond {
		t.Fatalf("notary timeout: %s after %s", kinds(v), time.Since(t0))
	}
}

func TestBadInputAndConfigErrors(t *testing.T) {
	w := newWorld(t, 1, false)
	c := w.client(t, nil)
	if _, err := c.Check(context.Background(), "127.0.0.1", w.targetPort, "AB:CD"); ErrorKind(err) != KindFingerprint {
		t.Fatalf("fingerprint: %v", err)
	}
	if _, err := c.Check(context.Background(), "a/b", 443, FingerprintOf(w.genuine.der, "sha1").ColonHex()); ErrorKind(err) != KindTarget {
		t.Fatalf("target: %v", err)
	}
	none := w.client(t, nil, []string{}...)
	none.Config.NotariesDir = t.TempDir()
	if _, err := none.Check(context.Background(), "127.0.0.1", 443, FingerprintOf(w.genuine.der, "sha1").ColonHex()); ErrorKind(err) != KindConfig {
		t.Fatalf("no notaries: %v", err)
	}
	if _, err := w.client(t, map[string]any{"bounce": true}).Check(context.Background(), "127.0.0.1", 443,
		FingerprintOf(w.genuine.der, "sha1").ColonHex()); ErrorKind(err) != KindConfig {
		t.Fatalf("bounce with one notary: %v", err)
	}
}

func TestExtendedFormat(t *testing.T) {
	w := newWorld(t, 3, true)
	v := w.check(t, w.client(t, nil), w.genuine)
	if !v.Trusted || kinds(v) != "success/match success/match success/match" || v.Results[0].Protocol != ExtendedFormat {
		t.Fatalf("%v %s %+v", v.Trusted, kinds(v), v.Results[0])
	}
	if w.notaries[0].lastNonce == "" || len(v.Results[0].Answer) == 0 {
		t.Fatal("no nonce sent or no answer kept")
	}
	v = w.check(t, w.client(t, nil), w.forged)
	if v.Trusted || kinds(v) != "failure/mismatch failure/mismatch failure/mismatch" {
		t.Fatalf("forged: %v %s", v.Trusted, kinds(v))
	}
	v = w.check(t, w.client(t, map[string]any{"extended": "off"}), w.genuine)
	if !v.Trusted || kinds(v) != "success/listed success/listed success/listed" {
		t.Fatalf("off: %s", kinds(v))
	}
	// a signing key the bundle does not list: unknown-key, and never a legacy fallback
	bs := w.bundles()
	w.notaries[1].edKey = w.notaries[0].edKey
	v = w.check(t, w.client(t, map[string]any{"extended": "fallback", "notary-agreement": "consensus"}, bs...), w.genuine)
	if v.Trusted || kinds(v) != "success/match failure/unknown-key success/match" {
		t.Fatalf("unknown key: %v %s", v.Trusted, kinds(v))
	}
}

func TestExtendedFallbackAndRequire(t *testing.T) {
	w := newWorld(t, 2, true)
	bs := w.bundles()
	w.notaries[1].extended = false // advertises the format, answers 404
	v := w.check(t, w.client(t, nil, bs...), w.genuine)
	if kinds(v) != "success/match unreachable/status" {
		t.Fatalf("prefer: %s", kinds(v))
	}
	v = w.check(t, w.client(t, map[string]any{"extended": "fallback"}, bs...), w.genuine)
	if kinds(v) != "success/match success/listed" || v.Results[1].Protocol != LegacyFormat {
		t.Fatalf("fallback: %s", kinds(v))
	}
	legacy := w.notaries[1].bundle("Org L", "127.0.0.1", 1)
	c := w.client(t, map[string]any{"extended": "require"}, legacy)
	if _, err := c.Check(context.Background(), "127.0.0.1", w.targetPort, FingerprintOf(w.genuine.der, "sha1").ColonHex()); ErrorKind(err) != KindConfig {
		t.Fatalf("require without an offering bundle: %v", err)
	}
	v = w.check(t, w.client(t, map[string]any{"extended": "require"}, bs[0], legacy), w.genuine)
	if len(v.Results) != 1 || v.Results[0].Kind != "match" {
		t.Fatalf("require asks only the offering notary: %s", kinds(v))
	}
}

// two notaries on 127.0.0.21/22 sharing one port (like 4242), each with a CONNECT relay
func TestBounceRelay(t *testing.T) {
	w := newWorld(t, 0, false)
	var bounce int
	var ns []*fakeNotary
	for attempt := 0; attempt < 20 && ns == nil; attempt++ {
		a := startNotaryOrNil(t, "127.0.0.21:0", makeCert(t, 2, "notary-a.test"))
		if a == nil {
			t.Skip("cannot bind 127.0.0.21")
		}
		b := startNotaryOrNil(t, fmt.Sprintf("127.0.0.22:%d", a.port()), makeCert(t, 3, "notary-b.test"))
		if b != nil {
			bounce, ns = a.port(), []*fakeNotary{a, b}
		}
	}
	if ns == nil {
		t.Fatal("no common port")
	}
	var bs []string
	for i, n := range ns {
		n.sees(w.loc(), w.genuine.der)
		ip := fmt.Sprintf("127.0.0.2%d", i+1)
		bs = append(bs, n.bundle(fmt.Sprintf("Org %c", 'A'+i), ip, startRelay(t, ip+":0", bounce)))
	}
	v := w.check(t, w.client(t, map[string]any{"bounce": true, "bounce-port": bounce}, bs...), w.genuine)
	if !v.Trusted || v.Relay == "" || kinds(v) != "success/listed" || !strings.Contains(v.Results[0].Host, "via "+v.Relay) {
		t.Fatalf("%v relay=%q %s %+v", v.Trusted, v.Relay, kinds(v), v.Results)
	}
	v = w.check(t, w.client(t, map[string]any{"bounce": true, "bounce-port": bounce + 1}, bs...), w.genuine)
	if v.Trusted || v.Relay == "" || kinds(v) != "unreachable/unreachable" {
		t.Fatalf("refused tunnel: %v %s", v.Trusted, kinds(v))
	}
}

func startNotaryOrNil(t *testing.T, addr string, cert testCert) (n *fakeNotary) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil
	}
	ln.Close()
	return startNotary(t, addr, cert)
}

func TestTLSHook(t *testing.T) {
	w := newWorld(t, 3, false)
	c := w.client(t, nil)
	conn, err := tls.Dial("tcp", w.loc(), c.TLSConfig(nil, "127.0.0.1", w.targetPort))
	if err != nil {
		t.Fatalf("genuine refused: %v", err)
	}
	conn.Close()
	// the notaries see another certificate than the one this server shows
	for _, n := range w.notaries {
		n.sees(w.loc(), w.forged.der)
	}
	c2 := w.client(t, nil)
	_, err = tls.Dial("tcp", w.loc(), c2.TLSConfig(nil, "127.0.0.1", w.targetPort))
	var nt *NotTrustedError
	if !errors.As(err, &nt) || nt.Verdict == nil || nt.Verdict.Trusted {
		t.Fatalf("a certificate the notaries do not see was accepted: %v", err)
	}
	// RequireCA: the self-signed target fails CA validation even where the notaries agree
	_, err = tls.Dial("tcp", w.loc(), c.TLSConfigWith(nil, "127.0.0.1", w.targetPort, TLSOptions{RequireCA: true}))
	if !errors.As(err, &nt) || nt.Verdict != nil {
		t.Fatalf("RequireCA accepted an unknown authority: %v", err)
	}
}

func TestHTTPTransportHook(t *testing.T) {
	w := newWorld(t, 2, false)
	c := w.client(t, nil)
	hc := &http.Client{Transport: &http.Transport{DialTLSContext: c.DialTLSContext(nil)}, Timeout: 10 * time.Second}
	resp, err := hc.Get("https://" + w.loc() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Fatalf("%q", body)
	}
	for _, n := range w.notaries {
		n.sees(w.loc(), w.forged.der)
	}
	hc2 := &http.Client{Transport: &http.Transport{DialTLSContext: w.client(t, nil).DialTLSContext(nil)}, Timeout: 10 * time.Second}
	if _, err := hc2.Get("https://" + w.loc() + "/"); err == nil {
		t.Fatal("forged view accepted through the transport")
	}
}

// A cache written by another client (the add-on schema, millisecond timestamps as the
// JavaScript add-on wrote them) is read; entries written here are readable by it.
func TestCacheSharedWithOtherClients(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed: cannot write a cache with another SQLite client")
	}
	w := newWorld(t, 1, false)
	d := writeConfig(t, map[string]any{"cache-lifetime": 3600}, w.bundles()...)
	db := filepath.Join(d, "cache.sqlite3")
	fp := FingerprintOf(w.genuine.der, "sha1").ColonHex()
	script := fmt.Sprintf(`import sqlite3, time
c = sqlite3.connect(%q)
c.execute("CREATE TABLE fingerprints (id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER)")
c.execute("CREATE UNIQUE INDEX location_fingerprint on fingerprints (location, fingerprint)")
c.execute("INSERT INTO fingerprints (location, fingerprint, timestamp) VALUES (?, ?, ?)", ("127.0.0.1:%d", %q, int(time.time() * 1000)))
c.commit()`, db, w.targetPort, fp)
	if out, err := exec.Command(py, "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	c, err := NewClient(d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v := w.check(t, c, w.genuine)
	if !v.FromCache || w.notaries[0].requests != 0 {
		t.Fatalf("entry of another client not used: %+v", v)
	}
	v = w.check(t, c, w.forged)
	if v.FromCache || v.Trusted {
		t.Fatal("a different fingerprint was a cache hit")
	}
	// now a trusted verdict of our own, read back by the other client
	w.notaries[0].sees("127.0.0.1:8443", w.genuine.der)
	if v, err := c.Check(context.Background(), "127.0.0.1", 8443, fp); err != nil || !v.Trusted {
		t.Fatalf("%v %v", v, err)
	}
	c.Close()
	out, err := exec.Command(py, "-c", fmt.Sprintf(`import sqlite3
print(sqlite3.connect(%q).execute("SELECT fingerprint FROM fingerprints WHERE location = '127.0.0.1:8443'").fetchone()[0])`, db)).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != fp {
		t.Fatalf("%v %s", err, out)
	}
}

func TestConvergeDiscoversTheConfiguration(t *testing.T) {
	w := newWorld(t, 2, false)
	t.Setenv(ConfigEnvVar, writeConfig(t, nil, w.bundles()...))
	v, err := Converge(context.Background(), "127.0.0.1", w.targetPort, FingerprintOf(w.genuine.der, "sha1").ColonHex())
	if err != nil || !v.Trusted {
		t.Fatalf("%v %v", v, err)
	}
	t.Setenv(ConfigEnvVar, filepath.Join(os.TempDir(), "converge-missing-config-dir"))
	if _, err := Converge(context.Background(), "127.0.0.1", w.targetPort, FingerprintOf(w.genuine.der, "sha1").ColonHex()); ErrorKind(err) != KindConfig {
		t.Fatalf("missing configuration: %v", err)
	}
}

// The ip option: the notaries are asked to connect to the caller's address; an extended
// answer about another address (one the client did not name) is wrong-target.
func TestIPOptionAndTargetAddressBinding(t *testing.T) {
	w := newWorld(t, 2, true)
	bs := w.bundles()
	fp := FingerprintOf(w.genuine.der, "sha1").ColonHex()
	v, err := w.client(t, nil, bs...).CheckWith(context.Background(), "127.0.0.1", w.targetPort, fp, CheckOptions{IP: "127.0.0.1"})
	if err != nil || !v.Trusted || kinds(v) != "success/match success/match" || w.notaries[0].lastIP != "127.0.0.1" {
		t.Fatalf("%v %s ip=%q %v", v.Trusted, kinds(v), w.notaries[0].lastIP, err)
	}
	v, _ = w.client(t, map[string]any{"extended": "off"}, bs...).CheckWith(context.Background(), "127.0.0.1", w.targetPort, fp, CheckOptions{IP: "127.0.0.1"})
	if !v.Trusted || w.notaries[1].lastIP != "127.0.0.1" {
		t.Fatalf("legacy /target/<host>+<port>/<ip>: %s ip=%q", kinds(v), w.notaries[1].lastIP)
	}
	w.notaries[1].probeIP = "127.0.0.2"
	v = w.check(t, w.client(t, map[string]any{"notary-agreement": "consensus"}, bs...), w.genuine)
	if v.Trusted || kinds(v) != "success/match failure/wrong-target" {
		t.Fatalf("an answer about an address nobody named: %v %s", v.Trusted, kinds(v))
	}
	if _, err := w.client(t, nil, bs...).CheckWith(context.Background(), "127.0.0.1", w.targetPort, fp, CheckOptions{IP: "1.2.3"}); ErrorKind(err) != KindTarget {
		t.Fatalf("bad ip: %v", err)
	}
}

// All physical hosts of one logical notary are raced: a dead host or one with another
// certificate does not hide a live one; when none answers definitively the most telling
// failure (the pin) is the vote.
func TestPhysicalHostsAreRaced(t *testing.T) {
	w := newWorld(t, 2, false)
	live, other := w.notaries[0], w.notaries[1]
	host := func(port int, pemText string) map[string]any {
		return map[string]any{"host": "127.0.0.1", "ssl_port": port, "http_port": 1, "certificate": pemText}
	}
	mk := func(hosts ...map[string]any) string {
		b, _ := json.Marshal(map[string]any{"version": 1, "name": "Org Multi", "hosts": hosts})
		return string(b)
	}
	// dead host first, then a host presenting another certificate than pinned, then the live one
	b := mk(host(deadPort(t), live.cert.pem), host(other.port(), live.cert.pem), host(live.port(), live.cert.pem))
	v := w.check(t, w.client(t, nil, b), w.genuine)
	if !v.Trusted || kinds(v) != "success/listed" || v.Results[0].Host != fmt.Sprintf("127.0.0.1:%d", live.port()) {
		t.Fatalf("%v %s %+v", v.Trusted, kinds(v), v.Results)
	}
	b = mk(host(deadPort(t), live.cert.pem), host(other.port(), live.cert.pem))
	v = w.check(t, w.client(t, nil, b), w.genuine)
	if v.Trusted || kinds(v) != "failure/pin" {
		t.Fatalf("no definitive answer: %v %s", v.Trusted, kinds(v))
	}
}
