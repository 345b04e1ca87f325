package converge

import (
	"bufio"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Test fixtures: self-signed certificates, a notary-like TLS server speaking the legacy and
// the extended format on 127.0.0.1, a CONNECT relay, and configuration directories.

// owner is what the fixtures need from a test: testing.TB, or processOwner for servers that
// outlive one benchmark.
type owner interface {
	Helper()
	Fatal(args ...any)
	Cleanup(func())
}

// processOwner keeps fixtures for the life of the test binary (closed by TestMain).
type processOwner struct {
	mu       sync.Mutex
	cleanups []func()
}

func (p *processOwner) Helper()           {}
func (p *processOwner) Fatal(args ...any) { panic(fmt.Sprint(args...)) }
func (p *processOwner) Cleanup(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cleanups = append(p.cleanups, f)
}

func (p *processOwner) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.cleanups) - 1; i >= 0; i-- {
		p.cleanups[i]()
	}
	p.cleanups = nil
}

type testCert struct {
	der  []byte
	pem  string
	key  *rsa.PrivateKey
	cert tls.Certificate
}

var (
	keyOnce sync.Once
	rsaKeys []*rsa.PrivateKey
)

// testKey returns one of four RSA keys generated once per test binary.
func testKey(t owner, i int) *rsa.PrivateKey {
	keyOnce.Do(func() {
		for n := 0; n < 4; n++ {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			rsaKeys = append(rsaKeys, k)
		}
	})
	return rsaKeys[i%len(rsaKeys)]
}

func makeCert(t owner, keyIndex int, cn string, ips ...string) testCert {
	t.Helper()
	key := testKey(t, keyIndex)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"converge tests"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		DNSNames:     []string{cn},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return testCert{der, p, key, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}}
}

// fakeNotary answers /target/<host>+<port> (legacy) and /v2/answer (extended) from a fixed
// view: location -> DER of the certificate it "sees".
type fakeNotary struct {
	t         owner
	ln        net.Listener
	cert      testCert // TLS certificate (pinned by the bundle) and legacy signing key
	signKey   *rsa.PrivateKey
	edKey     ed25519.PrivateKey
	extended  bool // answer /v2/answer (else 404)
	mu        sync.Mutex
	view      map[string][]byte
	silent    bool          // accept and never answer
	reset     bool          // read the request, then reset the connection
	delay     time.Duration // before answering
	requests  int
	asked     []string // request paths, in order
	lastNonce string
	lastIP    string // the address a request asked the notary to connect to
	probeIP   string // extended: name this address in target.ip whatever was asked
	// hostile forms (nil = answer genuinely): the legacy body built from the fingerprint the
	// notary sees and its signer; the extended statement before signing; the whole answer
	legacyForm func(seen string, sign func(string) string) string
	stmtForm   func(stmt string) string
	answerForm func(answer string) string
}

// answerWith sets the hostile forms the notary answers with from now on.
func (n *fakeNotary) answerWith(legacy func(string, func(string) string) string, stmt, answer func(string) string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.legacyForm, n.stmtForm, n.answerForm = legacy, stmt, answer
}

// sign is the legacy signature of s (base64 RSASSA-PKCS1-v1_5 SHA-1) by the notary's key.
func (n *fakeNotary) sign(s string) string {
	h := sha1.Sum([]byte(s))
	sig, err := rsa.SignPKCS1v15(rand.Reader, n.signKey, crypto.SHA1, h[:])
	if err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(sig)
}

// legacyEntry is one fingerprintList entry as the 2011 notary wrote it.
func legacyEntry(fp string) string {
	return `{"timestamp": {"start": "1323389219", "finish": "1324691510"}, "fingerprint": "` + fp + `"}`
}

func startNotary(t owner, addr string, cert testCert) *fakeNotary {
	t.Helper()
	ln, err := tls.Listen("tcp", addr, &tls.Config{Certificates: []tls.Certificate{cert.cert}})
	if err != nil {
		t.Fatal(err)
	}
	seed := sha1.Sum([]byte(cert.pem))
	n := &fakeNotary{t: t, ln: ln, cert: cert, signKey: cert.key, view: map[string][]byte{},
		edKey: ed25519.NewKeyFromSeed(append(seed[:], seed[:12]...))}
	go n.serve()
	t.Cleanup(func() { ln.Close() })
	return n
}

func (n *fakeNotary) port() int { return n.ln.Addr().(*net.TCPAddr).Port }

func (n *fakeNotary) sees(loc string, der []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.view[loc] = der
}

func (n *fakeNotary) serve() {
	for {
		c, err := n.ln.Accept()
		if err != nil {
			return
		}
		go n.handle(c)
	}
}

func readRequest(r *bufio.Reader) (string, []byte, error) {
	var head []string
	length := 0
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return "", nil, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		head = append(head, line)
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "content-length") {
			length, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", nil, err
	}
	return head[0], body, nil
}

func (n *fakeNotary) handle(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	line, body, err := readRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	n.mu.Lock()
	n.requests++
	if f := strings.Fields(line); len(f) == 3 {
		n.asked = append(n.asked, f[1])
	}
	silent, delay, reset := n.silent, n.delay, n.reset
	n.mu.Unlock()
	if silent {
		io.Copy(io.Discard, c)
		return
	}
	if reset {
		resetConn(c)
		return
	}
	time.Sleep(delay)
	parts := strings.Fields(line)
	var resp []byte
	switch {
	case len(parts) == 3 && strings.HasPrefix(parts[1], "/target/"):
		resp = n.legacy(strings.TrimPrefix(parts[1], "/target/"), body)
	case len(parts) == 3 && parts[1] == "/v2/answer" && n.extended:
		resp = n.extendedAnswer(body)
	default:
		resp = []byte("HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")
	}
	c.Write(resp)
}

// resetConn closes c with a TCP reset (SO_LINGER 0) instead of a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if tcp, ok := c.(*net.TCPConn); ok {
		tcp.SetLinger(0)
	}
	c.Close()
}

func colonHex(d []byte) string { return Fingerprint{"", d}.ColonHex() }

func (n *fakeNotary) legacy(target string, body []byte) []byte {
	host, port, _ := strings.Cut(target, "+")
	port, ip, _ := strings.Cut(port, "/")
	loc := host + ":" + port
	n.mu.Lock()
	n.lastIP = ip
	n.mu.Unlock()
	asked, _ := ParseFingerprint(strings.TrimPrefix(string(body), "fingerprint="))
	n.mu.Lock()
	der, ok := n.view[loc]
	n.mu.Unlock()
	if !ok {
		return []byte("HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
	}
	seen := FingerprintOf(der, "sha1")
	status := "409 Conflict"
	if seen.Equal(asked) || FingerprintOf(der, "sha256").Equal(asked) {
		status = "200 OK"
	}
	signed := `{"fingerprintList": [` + legacyEntry(seen.ColonHex()) + `]}`
	full := signed[:len(signed)-1] + `, "signature": "` + n.sign(signed) + `"}`
	n.mu.Lock()
	form := n.legacyForm
	n.mu.Unlock()
	if form != nil {
		full = form(seen.ColonHex(), n.sign)
	}
	return []byte(fmt.Sprintf("HTTP/1.0 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", status, len(full), full))
}

func (n *fakeNotary) keyID() string { return keyIDOf(n.edKey.Public().(ed25519.PublicKey)) }

func jsonStr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (n *fakeNotary) extendedAnswer(body []byte) []byte {
	var req struct {
		Host, Fingerprint, Alg, Nonce, IP string
		Port                              int
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return []byte("HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
	}
	n.mu.Lock()
	n.lastNonce, n.lastIP = req.Nonce, req.IP
	probe := n.probeIP
	der, ok := n.view[fmt.Sprintf("%s:%d", req.Host, req.Port)]
	n.mu.Unlock()
	asked, _ := ParseFingerprint(req.Fingerprint)
	verdict, status, obs := "unreachable", 503, "[]"
	if ok {
		verdict, status = "mismatch", 409
		if FingerprintOf(der, asked.Algorithm).Equal(asked) {
			verdict, status = "match", 200
		}
		obs = fmt.Sprintf(`[{"first_seen":1,"last_seen":2,"sha1":"%s","sha256":"%s"}]`,
			FingerprintOf(der, "sha1").ColonHex(), FingerprintOf(der, "sha256").ColonHex())
	}
	ip := "null"
	if req.IP != "" {
		ip = jsonStr(req.IP)
	}
	if probe != "" {
		ip = jsonStr(probe)
	}
	nonce := "null"
	if req.Nonce != "" {
		nonce = jsonStr(req.Nonce)
	}
	stmt := fmt.Sprintf(`{"address":null,"answered_at":%d,"cache":"hit","detail":null,"key_id":"%s","observations":%s,`+
		`"request":{"alg":%s,"fingerprint":%s,"nonce":%s},"target":{"host":%s,"ip":%s,"port":%d},`+
		`"type":"converge-answer/1","verdict":"%s"}`,
		time.Now().Unix(), n.keyID(), obs, jsonStr(asked.Algorithm), jsonStr(asked.ColonHex()), nonce,
		jsonStr(strings.ToLower(req.Host)), ip, req.Port, verdict)
	n.mu.Lock()
	stmtForm, answerForm := n.stmtForm, n.answerForm
	n.mu.Unlock()
	if stmtForm != nil {
		stmt = stmtForm(stmt)
	}
	sig := ed25519.Sign(n.edKey, []byte(stmt))
	doc := fmt.Sprintf(`{"signature":{"alg":"ed25519","key_id":"%s","value":"%s"},"statement":%s}`,
		n.keyID(), b64url(sig), stmt)
	if answerForm != nil {
		doc = answerForm(doc)
	}
	return []byte(fmt.Sprintf("HTTP/1.0 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
		status, AnswerMediaType, len(doc), doc))
}

// bundle writes this notary's .notary JSON (host as given, its port, http_port relayPort).
func (n *fakeNotary) bundle(name, host string, relayPort int) string {
	doc := map[string]any{"version": 1, "name": name, "hosts": []any{map[string]any{
		"host": host, "ssl_port": n.port(), "http_port": relayPort, "certificate": n.cert.pem}}}
	if n.extended {
		doc["protocols"] = []string{"convergence-v1", ExtendedFormat}
		doc["signing_keys"] = []any{map[string]any{"alg": "ed25519", "key_id": n.keyID(),
			"public_key": b64url(n.edKey.Public().(ed25519.PublicKey)), "status": "current"}}
	}
	b, _ := json.Marshal(doc)
	return string(b)
}

// writeConfig makes a configuration directory enabling the bundles (in order).
func writeConfig(t testing.TB, settings map[string]any, bundles ...string) string {
	t.Helper()
	d := t.TempDir()
	os.MkdirAll(filepath.Join(d, "notaries-available"), 0o755)
	os.MkdirAll(filepath.Join(d, "notaries-enabled"), 0o755)
	for i, b := range bundles {
		name := fmt.Sprintf("%02d.notary", i)
		if err := os.WriteFile(filepath.Join(d, "notaries-available", name), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "notaries-available", name), filepath.Join(d, "notaries-enabled", name)); err != nil {
			t.Fatal(err)
		}
	}
	cfg := map[string]any{"db": "cache.sqlite3", "early-return": false, "connect-timeout": 2,
		"notary-timeout": 3, "total-timeout": 5}
	for k, v := range settings {
		cfg[k] = v
	}
	raw, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(d, ConfigFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

// deadPort is a 127.0.0.1 port where nothing listens.
func deadPort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return p
}

// startRelay runs a CONNECT relay on addr that accepts destinations on port bouncePort only
// (403 otherwise) and names the host it connected to.
func startRelay(t owner, addr string, bouncePort int) int {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				r := bufio.NewReader(c)
				line, _, err := readRequest(r)
				if err != nil {
					return
				}
				parts := strings.Fields(line)
				host, port, _ := net.SplitHostPort(parts[1])
				if parts[0] != "CONNECT" || port != strconv.Itoa(bouncePort) {
					c.Write([]byte("HTTP/1.0 403 Access Denied\r\n\r\n"))
					return
				}
				up, err := net.DialTimeout("tcp", parts[1], 2*time.Second)
				if err != nil {
					c.Write([]byte("HTTP/1.0 404 Unable to connect\r\n\r\n"))
					return
				}
				defer up.Close()
				fmt.Fprintf(c, "HTTP/1.0 200 Connection Established\r\nProxy-Agent: Convergence\r\nX-Convergence-Notary: %s\r\n\r\n", host)
				go io.Copy(up, r)
				io.Copy(c, up)
			}(c)
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// targetServer is an HTTPS server presenting cert.
func targetServer(t owner, cert testCert) int {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert.cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				r := bufio.NewReader(c)
				if _, err := r.ReadString('\n'); err != nil {
					return
				}
				c.Write([]byte("HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"))
			}(c)
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}
