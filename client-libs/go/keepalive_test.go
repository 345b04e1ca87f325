package converge

// Kept connections against a real `notary serve` (startLogNotary), through a TCP forwarder
// on 127.0.0.1 that counts the connections clients open (TLS passes through it untouched, so
// the pin is the notary's) and can cut them all. Each must-pass case has its twin: the option
// off and the legacy format connect once per check; a cut connection is replaced once; a
// kept connection still carries a failure for a fingerprint the notary did not see.

import (
	"bufio"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

type countingForwarder struct {
	port     int
	upstream int
	ln       net.Listener
	mu       sync.Mutex
	accepted int
	open     []net.Conn
}

func newForwarder(t *testing.T, upstream int) *countingForwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &countingForwarder{port: ln.Addr().(*net.TCPAddr).Port, upstream: upstream, ln: ln}
	t.Cleanup(f.stop)
	go f.accept()
	return f
}

func (f *countingForwarder) accept() {
	for {
		down, err := f.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(f.upstream)), 10*time.Second)
		if err != nil {
			down.Close()
			continue
		}
		f.mu.Lock()
		f.accepted++
		f.open = append(f.open, down, up)
		f.mu.Unlock()
		go pump(down, up)
		go pump(up, down)
	}
}

func pump(src, dst net.Conn) {
	io.Copy(dst, src)
	src.Close()
	dst.Close()
}

// cut closes every connection, as a notary does with idle ones after its keep-alive timeout.
func (f *countingForwarder) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.open {
		c.Close()
	}
	f.open = nil
}

func (f *countingForwarder) stop() {
	f.ln.Close()
	f.cut()
}

func (f *countingForwarder) connections() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.accepted
}

// keptClient checks the log notary's target through the forwarder, with settings applied.
func keptClient(t *testing.T, n *realLogNotary, f *countingForwarder, settings func(*Config)) *Client {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Bundles, cfg.Extended, cfg.Quorum = []*Bundle{n.bundleVia(t, f.port, nil)}, ExtendedRequire, 1
	if settings != nil {
		settings(&cfg)
	}
	c := NewClientFromConfig(cfg) // no DB: every check asks the notary
	t.Cleanup(func() { c.Close() })
	return c
}

func checkVote(t *testing.T, c *Client, port int, fp string, vote Vote, kind string) {
	t.Helper()
	v, err := c.Check(context.Background(), "127.0.0.1", port, fp)
	if err != nil || len(v.Results) != 1 {
		t.Fatalf("check: %+v %v", v, err)
	}
	r := v.Results[0]
	if r.Vote != vote || r.Kind != kind || v.Trusted != (vote == VoteSuccess) {
		t.Fatalf("vote %s/%s (%s), trusted %v; expected %s/%s", r.Vote, r.Kind, r.Detail, v.Trusted, vote, kind)
	}
}

func TestKeepAliveExtendedChecksShareOneConnection(t *testing.T) {
	n := startLogNotary(t)
	f := newForwarder(t, n.port)
	c := keptClient(t, n, f, nil)
	for i := 0; i < 3; i++ {
		checkVote(t, c, n.targetPt, n.targetSHA, VoteSuccess, "match")
	}
	if got := f.connections(); got != 1 {
		t.Errorf("3 extended checks opened %d connections, expected 1", got)
	}
	if got := c.pool.idleCount(keyOf(c.Config.Bundles[0].Hosts[0])); got != 1 {
		t.Errorf("%d idle connections kept, expected 1", got)
	}
}

func TestKeepAliveOffOrLegacyConnectsPerCheck(t *testing.T) {
	// twin of the kept connection: DisableKeepAlives, and the legacy format (the add-on's
	// exact request, Connection: close) with keep-alive on
	n := startLogNotary(t)
	f := newForwarder(t, n.port)
	off := keptClient(t, n, f, func(c *Config) { c.DisableKeepAlives = true })
	for i := 0; i < 3; i++ {
		checkVote(t, off, n.targetPt, n.targetSHA, VoteSuccess, "match")
	}
	if got := f.connections(); got != 3 {
		t.Errorf("3 checks without keep-alive opened %d connections, expected 3", got)
	}
	legacy := keptClient(t, n, f, func(c *Config) { c.Extended = ExtendedOff })
	for i := 0; i < 2; i++ {
		checkVote(t, legacy, n.targetPt, n.targetSHA, VoteSuccess, "status-only")
	}
	if got := f.connections(); got != 5 {
		t.Errorf("2 legacy checks opened %d connections, expected 2", got-3)
	}
}

func TestKeepAliveConnectionClosedMeanwhileIsReplacedOnce(t *testing.T) {
	n := startLogNotary(t)
	f := newForwarder(t, n.port)
	c := keptClient(t, n, f, nil)
	checkVote(t, c, n.targetPt, n.targetSHA, VoteSuccess, "match")
	f.cut()
	time.Sleep(100 * time.Millisecond)
	checkVote(t, c, n.targetPt, n.targetSHA, VoteSuccess, "match")
	checkVote(t, c, n.targetPt, n.targetSHA, VoteSuccess, "match")
	if got := f.connections(); got != 2 {
		t.Errorf("%d connections, expected 2 (one replaced once, then kept)", got)
	}
}

func TestKeepAliveConnectionStillChecksTheAnswer(t *testing.T) {
	// a reused connection is no shortcut: a fingerprint the notary did not see is a failure
	// on it (twin: the genuine one before and after, on the same connection)
	n := startLogNotary(t)
	f := newForwarder(t, n.port)
	c := keptClient(t, n, f, nil)
	checkVote(t, c, n.targetPt, n.targetSHA, VoteSuccess, "match")
	checkVote(t, c, n.targetPt, strings.Repeat("AB", 32), VoteFailure, "mismatch")
	checkVote(t, c, n.targetPt, n.targetSHA, VoteSuccess, "match")
	if got := f.connections(); got != 1 {
		t.Errorf("%d connections, expected 1", got)
	}
}

func TestKeepAliveFraming(t *testing.T) {
	cases := []struct {
		head   string
		length int
		keep   bool
	}{
		{"HTTP/1.0 200 OK\r\nContent-Length: 12\r\nConnection: keep-alive\r\n\r\n", 12, true},
		{"HTTP/1.0 409 Conflict\r\nconnection: Keep-Alive\r\ncontent-length:0\r\n\r\n", 0, true},
		// twins: each doubt means read to the end, not kept
		{"HTTP/1.0 200 OK\r\nContent-Length: 12\r\n\r\n", 12, false},
		{"HTTP/1.0 200 OK\r\nContent-Length: 12\r\nConnection: close\r\n\r\n", 12, false},
		{"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n", -1, true},
		{"HTTP/1.0 200 OK\r\nContent-Length: 12\r\nContent-Length: 12\r\nConnection: keep-alive\r\n\r\n", -1, false},
		{"HTTP/1.0 200 OK\r\nContent-Length: +12\r\nConnection: keep-alive\r\n\r\n", -1, false},
		{"HTTP/1.0 200 OK\r\nContent-Length: 1234567890123\r\nConnection: keep-alive\r\n\r\n", -1, false},
		{"HTTP/1.0 200 OK\r\nContent-Length: 12\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n", -1, false},
	}
	for _, tc := range cases {
		length, keep := framing([]byte(tc.head))
		if length != tc.length || keep != tc.keep {
			t.Errorf("%q: framing %d %v, expected %d %v", tc.head, length, keep, tc.length, tc.keep)
		}
	}
}

func TestKeepAliveReadAnswer(t *testing.T) {
	head := "HTTP/1.0 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\n"
	read := func(s string, max int) ([]byte, bool, bool, error) {
		return readAnswer(bufio.NewReader(strings.NewReader(s)), max)
	}
	raw, reusable, started, err := read(head+"hello", 1024)
	if err != nil || string(raw) != head+"hello" || !reusable || !started {
		t.Errorf("framed answer: %q %v %v %v", raw, reusable, started, err)
	}
	// twins: bytes past the answer, a truncated body, an unframed answer, too large, nothing
	if _, reusable, _, err := read(head+"hello!", 1024); err != nil || reusable {
		t.Errorf("bytes past the answer: reusable %v %v", reusable, err)
	}
	if raw, reusable, _, err := read(head+"hel", 1024); err != nil || reusable || string(raw) != head+"hel" {
		t.Errorf("truncated body: %q %v %v", raw, reusable, err)
	}
	unframed := "HTTP/1.0 200 OK\r\nConnection: close\r\n\r\nhello, all of it"
	if raw, reusable, _, err := read(unframed, 1024); err != nil || reusable || string(raw) != unframed {
		t.Errorf("unframed: %q %v %v", raw, reusable, err)
	}
	if _, _, _, err := read(head+"hello", len(head)+4); ErrorKind(err) != KindResponse {
		t.Errorf("larger than the bound: %v", err)
	}
	if raw, _, started, err := read("", 1024); err != nil || started || len(raw) != 0 {
		t.Errorf("nothing: %q %v %v", raw, started, err)
	}
}

func TestNewDirectConnectionResumesTheSessionOfItsPin(t *testing.T) {
	// a new connection (keep-alive off) resumes the session of the last one to the same
	// host, port and pin, and the pin is checked on it; twins: no pool, another pin
	n := startLogNotary(t)
	b := n.bundleVia(t, n.port, nil)
	nh := b.Hosts[0]
	var pool connPool
	exchangeOnce := func(o *queryOpts, nh, pinned NotaryHost) (resumed bool, answer *hostAnswer) {
		t.Helper()
		conn, _, err := openDirect(context.Background(), nh, o)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		req, _ := extendedRequest("127.0.0.1", n.targetPt, mustFP(n.targetSHA), NewNonce(), "", false)
		ex := roundTrip(context.Background(), conn, bufio.NewReader(conn), pinned, "notary", req, 1<<20, false, false)
		if ex.answer == nil && !strings.HasPrefix(string(ex.raw), "HTTP/1.") {
			t.Fatalf("no answer: %q", ex.raw)
		}
		return conn.ConnectionState().DidResume, ex.answer
	}
	with := &queryOpts{pool: &pool}
	if resumed, a := exchangeOnce(with, nh, nh); resumed || a != nil {
		t.Fatalf("first connection: resumed %v, %+v", resumed, a)
	}
	if resumed, a := exchangeOnce(with, nh, nh); !resumed || a != nil {
		t.Errorf("second connection: resumed %v, %+v", resumed, a)
	}
	if resumed, _ := exchangeOnce(&queryOpts{}, nh, nh); resumed {
		t.Error("resumed without a session cache")
	}
	other := nh
	other.Pin.Digest = make([]byte, 20)
	// a resumed session is checked against the pin with the certificate it was made with
	if resumed, a := exchangeOnce(with, nh, other); !resumed || a == nil || a.outcome.Kind != KindPin {
		t.Errorf("resumed, another pin expected: resumed %v, %+v", resumed, a)
	}
	if resumed, a := exchangeOnce(with, other, other); resumed || a == nil || a.outcome.Kind != KindPin {
		t.Errorf("another pin's cache: resumed %v, %+v", resumed, a)
	}
}
