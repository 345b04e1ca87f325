package converge

// The transparency log's proofs against a real `notary serve` (its log on by default, `notary
// bundle` naming it): a match whose proof verifies is trusted; a relay holding the notary's
// certificate that strips or alters the answer's transparency member, a bundle requiring a
// witness the notary does not have and a bundle naming another log key each make that
// notary's vote a failure of the documented kind. Every case has its twin: the same relay or
// bundle without the change, or without the log.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

type realLogNotary struct {
	port      int
	bundle    map[string]any
	cert      tls.Certificate
	targetPt  int
	targetSHA string
}

var (
	logNotaryOnce sync.Once
	logNotary     *realLogNotary
	logNotaryErr  error
)

// startLogNotary starts one `notary serve` for the package's tests (stopped in TestMain's
// cleanup through benchOwner).
func startLogNotary(t *testing.T) *realLogNotary {
	t.Helper()
	logNotaryOnce.Do(func() { logNotary, logNotaryErr = launchLogNotary() })
	if logNotaryErr != nil {
		t.Fatal(logNotaryErr)
	}
	return logNotary
}

func launchLogNotary() (*realLogNotary, error) {
	exe := os.Getenv("NOTARY")
	if exe == "" {
		exe, _ = filepath.Abs(filepath.Join("..", "..", ".venv", "bin", "notary"))
	}
	if _, err := os.Stat(exe); err != nil {
		return nil, fmt.Errorf("notary console script (make setup): %v", err)
	}
	genuine := makeCert(&benchOwner, 0, "target.test", "127.0.0.1")
	env := &realLogNotary{targetPt: targetServer(&benchOwner, genuine),
		targetSHA: FingerprintOf(genuine.der, "sha256").ColonHex()}
	tmp, err := os.MkdirTemp("", "converge-go-log-")
	if err != nil {
		return nil, err
	}
	benchOwner.Cleanup(func() { os.RemoveAll(tmp) })
	dir := filepath.Join(tmp, "data")
	if env.port, err = freePort(); err != nil {
		return nil, err
	}
	p := exec.Command(exe, "serve", "--data-dir", dir, "--listen", fmt.Sprintf("127.0.0.1:%d", env.port),
		"--allow-target", "127.0.0.0/8", "--probe-timeout", "2", "--log-interval", "0.2")
	logFile, _ := os.Create(filepath.Join(tmp, "notary.log"))
	p.Stdout, p.Stderr = logFile, logFile
	if err := p.Start(); err != nil {
		return nil, err
	}
	benchOwner.Cleanup(func() { p.Process.Kill(); p.Wait() })
	ready := false
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", env.port), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec
		if err == nil {
			c.Close()
			ready = true
			break
		}
	}
	if !ready {
		msg, _ := os.ReadFile(filepath.Join(tmp, "notary.log"))
		return nil, fmt.Errorf("notary serve did not start: %s", msg)
	}
	out := filepath.Join(tmp, "org.notary")
	if msg, err := exec.Command(exe, "bundle", "--data-dir", dir, "--host", "127.0.0.1", "--ssl-port",
		strconv.Itoa(env.port), "--name", "Org Log", "-o", out).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("notary bundle: %v: %s", err, msg)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &env.bundle); err != nil {
		return nil, err
	}
	if env.cert, err = tls.LoadX509KeyPair(filepath.Join(dir, "notary.pem"), filepath.Join(dir, "notary.key")); err != nil {
		return nil, err
	}
	return env, nil
}

// bundleVia is the notary's bundle with its host's port set to port, changed by change.
func (n *realLogNotary) bundleVia(t *testing.T, port int, change func(map[string]any)) *Bundle {
	t.Helper()
	raw, _ := json.Marshal(n.bundle)
	var doc map[string]any
	json.Unmarshal(raw, &doc)
	doc["hosts"].([]any)[0].(map[string]any)["ssl_port"] = port
	if change != nil {
		change(doc)
	}
	raw, _ = json.Marshal(doc)
	b, err := ParseBundle(raw)
	if err != nil {
		t.Fatalf("bundle: %v", err)
	}
	return b
}

// ask checks the target with the one notary of bundle b, in the extended format only.
func (n *realLogNotary) ask(t *testing.T, b *Bundle) NotaryResult {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Bundles, cfg.Extended, cfg.Quorum, cfg.Agreement = []*Bundle{b}, ExtendedRequire, 1, Majority
	v, err := NewClientFromConfig(cfg).Check(context.Background(), "127.0.0.1", n.targetPt, n.targetSHA)
	if err != nil || len(v.Results) != 1 {
		t.Fatalf("check: %+v %v", v, err)
	}
	if r := v.Results[0]; (r.Vote == VoteSuccess) != v.Trusted {
		t.Fatalf("verdict %v does not follow the vote %+v", v.Trusted, r)
	}
	return v.Results[0]
}

// logRelay presents the notary's certificate, forwards each request and passes the answer
// body through rewrite; it records whether each request asked for a proof.
type logRelay struct {
	port    int
	mu      sync.Mutex
	asked   []bool
	rewrite func([]byte) []byte
}

func (n *realLogNotary) relay(t *testing.T, rewrite func([]byte) []byte) *logRelay {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{n.cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	r := &logRelay{port: ln.Addr().(*net.TCPAddr).Port, rewrite: rewrite}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go r.handle(c, n.port)
		}
	}()
	return r
}

func (r *logRelay) handle(c net.Conn, upstream int) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	line, body, err := readRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	r.mu.Lock()
	r.asked = append(r.asked, bytes.Contains(body, []byte(`"transparency":true`)))
	r.mu.Unlock()
	up, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", upstream), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec
	if err != nil {
		return
	}
	defer up.Close()
	up.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(up, "%s\r\nContent-Type: application/json\r\nAccept: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n",
		line, AnswerMediaType, len(body))
	up.Write(body)
	resp, _ := readToEOF(up, 1<<20)
	head, answer, ok := bytes.Cut(resp, []byte("\r\n\r\n"))
	if !ok {
		return
	}
	answer = r.rewrite(answer)
	var keep []string
	for _, h := range strings.Split(string(head), "\r\n") {
		if !strings.HasPrefix(strings.ToLower(h), "content-length:") {
			keep = append(keep, h)
		}
	}
	fmt.Fprintf(c, "%s\r\nContent-Length: %d\r\n\r\n", strings.Join(keep, "\r\n"), len(answer))
	c.Write(answer)
}

func (r *logRelay) proofsAsked() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.asked...)
}

func unchanged(b []byte) []byte { return b }

// withMember rewrites the answer's transparency member (change nil: removes it).
func withMember(change func(map[string]any)) func([]byte) []byte {
	return func(body []byte) []byte {
		i := bytes.Index(body, transparencyMember)
		if i < 0 {
			return body
		}
		if change == nil {
			return append(append([]byte{}, body[:i]...), '}')
		}
		var m map[string]any
		if json.Unmarshal(body[i+len(transparencyMember):len(body)-1], &m) != nil {
			return body
		}
		change(m)
		text, _ := json.Marshal(m)
		out := append(append([]byte{}, body[:i+len(transparencyMember)]...), text...)
		return append(out, '}')
	}
}

func flipFirstProofHash(m map[string]any) {
	proof, _ := m["proof"].([]any)
	if len(proof) == 0 {
		m["proof"] = []any{base64.StdEncoding.EncodeToString(make([]byte, 32))}
		return
	}
	h, _ := base64.StdEncoding.DecodeString(proof[0].(string))
	h[0] ^= 1
	proof[0] = base64.StdEncoding.EncodeToString(h)
}

func expectVote(t *testing.T, what string, r NotaryResult, vote Vote, kind string) {
	t.Helper()
	if r.Vote != vote || r.Kind != kind {
		t.Errorf("%s: vote %s/%s (%s), expected %s/%s", what, r.Vote, r.Kind, r.Detail, vote, kind)
	}
}

func TestLogProofOfRealNotaryTrusted(t *testing.T) {
	n := startLogNotary(t)
	b := n.bundleVia(t, n.port, nil)
	if b.Transparency == nil || b.Transparency.Log.Name == "" {
		t.Fatal("notary bundle names no transparency log")
	}
	expectVote(t, "direct", n.ask(t, b), VoteSuccess, "match")
	relay := n.relay(t, unchanged)
	r := n.ask(t, n.bundleVia(t, relay.port, nil))
	expectVote(t, "through an unchanged relay", r, VoteSuccess, "match")
	if !bytes.Contains(r.Answer, transparencyMember) {
		t.Error("the trusted answer carries no transparency member")
	}
	// twin: the same relay with a bundle naming no log: no proof asked
	expectVote(t, "no log", n.ask(t, n.bundleVia(t, relay.port, func(d map[string]any) { delete(d, "transparency") })),
		VoteSuccess, "match")
	if got := relay.proofsAsked(); len(got) != 2 || !got[0] || got[1] {
		t.Errorf("proofs asked %v, expected [true false]", got)
	}
}

func TestLogProofStrippedIsMissing(t *testing.T) {
	n := startLogNotary(t)
	relay := n.relay(t, withMember(nil))
	expectVote(t, "stripped", n.ask(t, n.bundleVia(t, relay.port, nil)), VoteFailure, RejectLogMissing)
	// twin: a bundle without the log takes the statement alone
	expectVote(t, "stripped, no log", n.ask(t, n.bundleVia(t, relay.port, func(d map[string]any) { delete(d, "transparency") })),
		VoteSuccess, "match")
}

func TestLogProofAlteredIsRejected(t *testing.T) {
	n := startLogNotary(t)
	relay := n.relay(t, withMember(flipFirstProofHash))
	expectVote(t, "altered proof", n.ask(t, n.bundleVia(t, relay.port, nil)), VoteFailure, RejectLogProof)
	entry := n.relay(t, withMember(func(m map[string]any) {
		raw, _ := base64.StdEncoding.DecodeString(m["entry"].(string))
		m["entry"] = base64.StdEncoding.EncodeToString(bytes.Replace(raw, []byte(`"port":`), []byte(`"port":1`), 1))
	}))
	expectVote(t, "entry of another port", n.ask(t, n.bundleVia(t, entry.port, nil)), VoteFailure, RejectLogEntry)
	// twin: a member rewritten to itself (re-serialised) still verifies
	same := n.relay(t, withMember(func(map[string]any) {}))
	expectVote(t, "re-serialised member", n.ask(t, n.bundleVia(t, same.port, nil)), VoteSuccess, "match")
}

func noteVKey(t *testing.T, name string, typ byte) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s+%08x+%s", name, noteKeyID(name, typ, pub),
		base64.StdEncoding.EncodeToString(append([]byte{typ}, pub...)))
}

func TestLogProofBundleKeys(t *testing.T) {
	n := startLogNotary(t)
	witness := noteVKey(t, "witness.test/w1", noteKeyCosignV1)
	withWitness := func(need int) func(map[string]any) {
		return func(d map[string]any) {
			tr := d["transparency"].(map[string]any)
			tr["witnesses"] = []any{map[string]any{"name": "witness.test/w1", "vkey": witness}}
			tr["min_cosignatures"] = need
		}
	}
	expectVote(t, "a required witness that did not cosign", n.ask(t, n.bundleVia(t, n.port, withWitness(1))),
		VoteFailure, RejectLogWitness)
	expectVote(t, "the same witness, none required", n.ask(t, n.bundleVia(t, n.port, withWitness(0))),
		VoteSuccess, "match")
	logName := n.bundleVia(t, n.port, nil).Transparency.Log.Name
	other := noteVKey(t, logName, noteKeyEd25519)
	expectVote(t, "another key under the log's name",
		n.ask(t, n.bundleVia(t, n.port, func(d map[string]any) { d["transparency"].(map[string]any)["log"] = other })),
		VoteFailure, RejectLogCheckpoint)
	// a malformed member is a bundle error at load
	raw, _ := json.Marshal(n.bundle)
	bad := bytes.Replace(raw, []byte(`"min_cosignatures":0`), []byte(`"min_cosignatures":1`), 1)
	if bytes.Equal(bad, raw) {
		t.Fatal("the bundle has no min_cosignatures 0 to change")
	}
	if _, err := ParseBundle(bad); ErrorKind(err) != KindBundle {
		t.Errorf("min_cosignatures above the witnesses: %v", err)
	}
	if _, err := ParseBundle(raw); err != nil {
		t.Errorf("twin: the bundle as written: %v", err)
	}
}
