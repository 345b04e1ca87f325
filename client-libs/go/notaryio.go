package converge

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Asking notaries over the network (IO): one TLS connection per physical host, pinned to the
// bundle's certificate (no CA or host name check; the pin is checked before every request,
// on resumed TLS sessions too: they carry the certificate of their first handshake), one
// legacy request, the response read until the server closes. A direct connection offers the
// TLS session of an earlier one to the same host, port and pin (resumption). An extended query over a
// direct connection keeps it open for the next one when the notary offers it (keepalive.go).
// All hosts of one logical notary are raced; the first definitive
// answer wins. Through a bounce relay, one CONNECT names every host of the notary and the
// relay picks. Every wait is bounded (connect timeout, notary timeout, response size).

// NotaryResult is what one logical notary said.
type NotaryResult struct {
	Name        string
	Vote        Vote // success, failure, unreachable, or skipped (settled before it answered)
	Kind        string
	Status      int // 0 = no HTTP status
	Host        string
	Detail      string
	Elapsed     time.Duration
	CacheStatus string
	Protocol    string // convergence-v1 or converge-answer/1; "" when not asked
	Answer      []byte // the verified extended answer, if any
}

type hostAnswer struct {
	outcome     Outcome
	host        string
	cacheStatus string
	protocol    string
}

// extQuery says how to ask one notary in the extended format.
type extQuery struct {
	keys     []SigningKey
	nonce    bool
	maxSkew  int64
	fallback bool
	now      func() float64
	log      *LogPolicy // the bundle's transparency log: ask for proofs and check them
}

// LegacyFormat is the protocol name of the 2011 wire format.
const LegacyFormat = "convergence-v1"

func notaryTLSConfig(serverName string) *tls.Config {
	return &tls.Config{
		// The bundle's pin replaces CA and host name checks; it is checked right after the
		// handshake, before the request is sent.
		InsecureSkipVerify: true, //nolint:gosec
		MinVersion:         tls.VersionTLS12,
		ServerName:         serverName,
	}
}

func serverNameFor(host string) string {
	if net.ParseIP(host) != nil {
		return ""
	}
	return host
}

// ConnectHead is the CONNECT head sent to a bounce relay for one notary's hosts (pure).
func ConnectHead(dests []NotaryHost, port int) []byte {
	first := dests[0].Host
	lines := []string{fmt.Sprintf("CONNECT %s:%d HTTP/1.1", first, port), "Host: " + first}
	for _, d := range dests[1:] {
		lines = append(lines, fmt.Sprintf("X-Convergence-Notary: %s+%d", d.Host, port))
	}
	return []byte(strings.Join(lines, "\r\n") + "\r\n\r\n")
}

var errUnreachable = errors.New("unreachable")

func unreachable(format string, args ...any) error {
	return ioFailure(KindUnreachable, errUnreachable, format, args...)
}

// ParseConnectReply says which destination a relay connected to (pure); a status other than
// 200 or an unknown destination is an "unreachable" error.
func ParseConnectReply(head []byte, dests []NotaryHost) (NotaryHost, error) {
	lines := strings.Split(latin1(head), "\r\n")
	parts := strings.SplitN(lines[0], " ", 3)
	if len(parts) < 2 || !strings.HasPrefix(parts[0], "HTTP/1.") || parts[1] != "200" {
		return NotaryHost{}, unreachable("relay refused the tunnel: %.80q", lines[0])
	}
	connected, found := "", false
	for _, line := range lines[1:] {
		name, value, _ := strings.Cut(line, ":")
		if strings.ToLower(pyStrip(name)) == "x-convergence-notary" {
			connected, found = strings.ToLower(pyStrip(value)), true
		}
	}
	if !found {
		if len(dests) == 1 {
			return dests[0], nil
		}
		return NotaryHost{}, unreachable("relay did not name the notary host it connected to")
	}
	host, _, _ := strings.Cut(connected, "+")
	for _, d := range dests {
		if h := strings.ToLower(d.Host); h == host || h == connected {
			return d, nil
		}
	}
	return NotaryHost{}, unreachable("relay connected to an unknown notary host %q", connected)
}

const maxRelayHead = 8192

// readHead reads a reply head byte by byte up to the blank line (nothing past it is
// consumed: TLS starts right after).
func readHead(conn net.Conn) ([]byte, error) {
	var head []byte
	b := make([]byte, 1)
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		if len(head) >= maxRelayHead {
			return nil, unreachable("relay reply head too large")
		}
		if _, err := conn.Read(b); err != nil {
			return nil, unreachable("relay closed the connection: %v", err)
		}
		head = append(head, b[0])
	}
	return head, nil
}

// queryOpts are the per-check settings a host query needs.
type queryOpts struct {
	connectTimeout time.Duration
	maxBytes       int
	relay          *Bundle
	relayDests     []NotaryHost
	bouncePort     int
	ext            *extQuery
	ip             string // ask the notaries to connect to this address ("" = resolve host)
	dialer         func(ctx context.Context, network, addr string) (net.Conn, error)
	pool           *connPool // the client's idle connections and TLS sessions (nil: none)
	keepAlive      bool      // extended queries over direct connections keep them open
}

func (o *queryOpts) dial(ctx context.Context, addr string) (net.Conn, error) {
	if o.dialer != nil {
		return o.dialer(ctx, "tcp", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// openDirect connects and handshakes with one host.
func openDirect(ctx context.Context, nh NotaryHost, o *queryOpts) (*tls.Conn, NotaryHost, error) {
	raw, err := o.dial(ctx, net.JoinHostPort(nh.Host, strconv.Itoa(nh.SSLPort)))
	if err != nil {
		return nil, nh, unreachable("%s:%d: %v", nh.Host, nh.SSLPort, err)
	}
	cfg := notaryTLSConfig(serverNameFor(nh.Host))
	if o.pool != nil {
		cfg.ClientSessionCache = o.pool.sessions(keyOf(nh))
	}
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, nh, unreachable("%s:%d: TLS: %v", nh.Host, nh.SSLPort, err)
	}
	return conn, nh, nil
}

// openViaRelay asks the relay (each of its hosts in turn) for a tunnel to one of dests.
func openViaRelay(ctx context.Context, o *queryOpts) (*tls.Conn, NotaryHost, error) {
	var last error
	for _, rh := range o.relay.Hosts {
		conn, nh, err := func() (*tls.Conn, NotaryHost, error) {
			raw, err := o.dial(ctx, net.JoinHostPort(rh.Host, strconv.Itoa(rh.HTTPPort)))
			if err != nil {
				return nil, NotaryHost{}, err
			}
			stop := afterFunc(ctx, func() { raw.Close() })
			defer stop()
			if _, err := raw.Write(ConnectHead(o.relayDests, o.bouncePort)); err != nil {
				raw.Close()
				return nil, NotaryHost{}, err
			}
			head, err := readHead(raw)
			if err != nil {
				raw.Close()
				return nil, NotaryHost{}, err
			}
			nh, err := ParseConnectReply(head, o.relayDests)
			if err != nil {
				raw.Close()
				return nil, NotaryHost{}, err
			}
			conn := tls.Client(raw, notaryTLSConfig(serverNameFor(nh.Host)))
			if err := conn.HandshakeContext(ctx); err != nil {
				raw.Close()
				return nil, NotaryHost{}, err
			}
			return conn, nh, nil
		}()
		if err == nil {
			return conn, nh, nil
		}
		last = err
	}
	return nil, NotaryHost{}, unreachable("no host of relay %q worked: %v", o.relay.Name, last)
}

// queryHost asks one physical host (or, through a relay, whichever destination the relay
// reaches). IO failures become outcomes, never errors. With o.ext the extended format is
// used, and with o.ext.fallback the legacy one when the host does not offer it (a failed
// verification never falls back).
func queryHost(ctx context.Context, nh NotaryHost, target string, port int, wanted []Fingerprint, o *queryOpts) hostAnswer {
	if o.ext == nil {
		return queryHostWith(ctx, nh, target, port, wanted, o, nil)
	}
	a := queryHostWith(ctx, nh, target, port, wanted, o, o.ext)
	if o.ext.fallback && a.outcome.Kind == "status" && notOffered[a.outcome.Status] {
		return queryHostWith(ctx, nh, target, port, wanted, o, nil)
	}
	return a
}

func queryHostWith(ctx context.Context, nh NotaryHost, target string, port int, wanted []Fingerprint, o *queryOpts, ext *extQuery) hostAnswer {
	protocol := LegacyFormat
	if ext != nil {
		protocol = ExtendedFormat
	}
	// the format it was asked in, also when it failed before answering
	a := queryHostOnce(ctx, nh, target, port, wanted, o, ext)
	a.protocol = protocol
	return a
}

func queryHostOnce(ctx context.Context, nh NotaryHost, target string, port int, wanted []Fingerprint, o *queryOpts, ext *extQuery) hostAnswer {
	label := fmt.Sprintf("%s:%d", nh.Host, nh.SSLPort)
	if o.relay != nil {
		label = fmt.Sprintf("%s:%d via %s", nh.Host, o.bouncePort, o.relay.Name)
	}
	var request []byte
	var err error
	asked, nonce := wanted[0], ""
	if ext == nil {
		request, err = RequestBytes(target, port, asked, o.ip)
	} else {
		asked = RequestFingerprint(wanted)
		if ext.nonce {
			nonce = NewNonce()
		}
		request, err = extendedRequest(target, port, asked, nonce, o.ip, ext.log != nil)
	}
	if err != nil {
		return hostAnswer{outcome: failureOf(err, 0), host: label}
	}
	// the extended format keeps a direct connection open when the notary offers it (the
	// legacy request stays the add-on's exact bytes, one per connection)
	keep := ext != nil && o.relay == nil && o.pool != nil && o.keepAlive
	if keep {
		request = bytes.Replace(request, connectionClose, connectionKeepAlive, 1)
	}
	var ex exchange
	done := false
	if keep {
		if kc := o.pool.take(keyOf(nh)); kc != nil {
			ex = roundTrip(ctx, kc.conn, kc.br, nh, label, request, o.maxBytes, true, true)
			if ex.stale {
				// the notary closed the kept connection meanwhile: a new one, once
				kc.conn.Close()
			} else {
				ex.conn, ex.br, done = kc.conn, kc.br, true
			}
		}
	}
	if !done {
		cctx, cancel := context.WithTimeout(ctx, o.connectTimeout)
		var conn *tls.Conn
		if o.relay == nil {
			conn, nh, err = openDirect(cctx, nh, o)
		} else {
			conn, nh, err = openViaRelay(cctx, o)
			if err == nil {
				label = fmt.Sprintf("%s:%d via %s", nh.Host, o.bouncePort, o.relay.Name)
			}
		}
		timedOut := cctx.Err() != nil && ctx.Err() == nil
		cancel()
		if err != nil {
			if timedOut {
				return hostAnswer{outcome: Outcome{Vote: VoteUnreachable, Kind: KindUnreachable, Detail: label + ": timed out"}, host: label}
			}
			return hostAnswer{outcome: Outcome{Vote: VoteUnreachable, Kind: lapsed(ctx), Detail: err.Error()}, host: label}
		}
		br := bufio.NewReader(conn)
		ex = roundTrip(ctx, conn, br, nh, label, request, o.maxBytes, keep, false)
		ex.conn, ex.br = conn, br
	}
	if ex.keep {
		o.pool.put(keyOf(nh), ex.conn, ex.br)
	} else {
		ex.conn.Close()
	}
	if ex.answer != nil {
		return *ex.answer
	}
	raw := ex.raw
	var outcome Outcome
	var resp *HTTPResponse
	if ext == nil {
		outcome, resp = OutcomeFromHTTP(raw, wanted, nh.Certificate.PublicKey, o.maxBytes)
	} else {
		now := int64(ext.now())
		resp, err = ParseHTTPResponse(raw, o.maxBytes)
		if err != nil {
			outcome = failureOf(err, 0)
		} else {
			outcome = EvaluateExtended(resp, TrustedKeys(ext.keys, now), Expect{Host: target, Port: port,
				Fingerprint: &asked, Nonce: nonce, Now: &now, MaxSkew: ext.maxSkew, BindIP: true, IP: o.ip, Log: ext.log})
		}
	}
	cs := ""
	if resp != nil {
		cs = resp.Headers["cache-status"]
	}
	return hostAnswer{outcome: outcome, host: label, cacheStatus: cs}
}

var (
	connectionClose     = []byte("\r\nConnection: close\r\n")
	connectionKeepAlive = []byte("\r\nConnection: keep-alive\r\n")
)

// exchange is what one request on one connection gave: the raw answer, or an outcome
// reached without one; stale: a kept connection ended before the first byte of an answer;
// keep: the answer was read in full by its length and the connection may serve the next.
type exchange struct {
	conn   *tls.Conn
	br     *bufio.Reader
	raw    []byte
	answer *hostAnswer
	stale  bool
	keep   bool
}

// roundTrip checks the pin, sends request and reads the answer (framed by its length when
// keepAlive, else to the end through conn itself). kept: conn served an earlier request.
func roundTrip(ctx context.Context, conn *tls.Conn, br *bufio.Reader, nh NotaryHost, label string,
	request []byte, maxBytes int, keepAlive, kept bool) exchange {
	stop := afterFunc(ctx, func() { conn.Close() })
	failed := func(oc Outcome) exchange {
		stop()
		return exchange{answer: &hostAnswer{outcome: oc, host: label}}
	}
	state := conn.ConnectionState()
	if len(state.PeerCertificates) == 0 || !pinMatches(state.PeerCertificates[0].Raw, nh.Pin.Digest) {
		return failed(Outcome{Vote: VoteFailure, Kind: KindPin,
			Detail: label + " presented a certificate other than the pinned one"})
	}
	if _, err := conn.Write(request); err != nil {
		if kept && endedBeforeAnswer(err) && stop() {
			return exchange{stale: true}
		}
		return failed(Outcome{Vote: VoteUnreachable, Kind: lapsed(ctx), Detail: fmt.Sprintf("%s: %v", label, err)})
	}
	var raw []byte
	var err error
	reusable, started := false, true
	if keepAlive {
		raw, reusable, started, err = readAnswer(br, maxBytes)
	} else {
		raw, err = readToEOF(conn, maxBytes)
	}
	if kept && !started && (err == nil || endedBeforeAnswer(err)) && stop() {
		return exchange{stale: true}
	}
	if err != nil {
		if e, ok := err.(*Error); ok && e.Family == BadInput {
			return failed(failureOf(err, 0))
		}
		if ctx.Err() != nil {
			return failed(Outcome{Vote: VoteUnreachable, Kind: lapsed(ctx), Detail: label + ": timed out"})
		}
		return failed(Outcome{Vote: VoteUnreachable, Kind: KindUnreachable, Detail: fmt.Sprintf("%s: %v", label, err)})
	}
	// kept only when the context's closer can no longer run
	return exchange{raw: raw, keep: stop() && reusable}
}

// readToEOF reads until the server closes, at most maxBytes. A close without close_notify
// after some data keeps what was read.
func readToEOF(r io.Reader, maxBytes int) ([]byte, error) {
	var buf bytes.Buffer
	chunk := make([]byte, 32*1024)
	for {
		n, err := r.Read(chunk)
		buf.Write(chunk[:n])
		if buf.Len() > maxBytes {
			return nil, responseErr("response larger than %d bytes", maxBytes)
		}
		if err == io.EOF {
			return buf.Bytes(), nil
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) && buf.Len() > 0 {
				return buf.Bytes(), nil
			}
			return nil, err
		}
	}
}

var definitiveKinds = map[string]bool{"listed": true, "status-only": true, "mismatch": true, "not-listed": true, "match": true}
var severity = map[string]int{"signature": 3, "response": 3, "pin": 2,
	RejectMalformed: 3, RejectUnknownKey: 3, RejectBadSignature: 3,
	RejectWrongTarget: 3, RejectNonceMismatch: 3, RejectStale: 3}

// lapsed is the kind of a failed exchange: "timeout" once the notary's own deadline has passed
// (so the answer does not depend on which goroutine noticed the deadline first), else
// "unreachable".
func lapsed(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return KindTimeout
	}
	return KindUnreachable
}

// askNotary races every physical host of b (or one relayed query naming all of them).
func askNotary(ctx context.Context, b *Bundle, target string, port int, wanted []Fingerprint,
	notaryTimeout time.Duration, o queryOpts) NotaryResult {
	t0 := time.Now()
	nctx, cancel := context.WithTimeout(ctx, notaryTimeout)
	defer cancel()
	hosts := b.Hosts
	if o.relay != nil {
		hosts = b.Hosts[:1]
		o.relayDests = b.Hosts
	}
	answers := make(chan hostAnswer, len(hosts))
	for _, h := range hosts {
		go func(h NotaryHost) { answers <- queryHost(nctx, h, target, port, wanted, &o) }(h)
	}
	var got []hostAnswer
	var winner *hostAnswer
wait:
	for range hosts {
		select {
		case a := <-answers:
			got = append(got, a)
			if definitiveKinds[a.outcome.Kind] {
				winner = &got[len(got)-1]
				break wait
			}
		case <-nctx.Done():
			break wait
		}
	}
	cancel()
	elapsed := time.Since(t0)
	if winner == nil && len(got) > 0 {
		best := 0
		for i, a := range got {
			if severity[a.outcome.Kind] > severity[got[best].outcome.Kind] {
				best = i
			}
		}
		winner = &got[best]
	}
	if winner == nil {
		return NotaryResult{Name: b.Name, Vote: VoteUnreachable, Kind: KindTimeout,
			Detail: fmt.Sprintf("no answer within %s", notaryTimeout), Elapsed: elapsed}
	}
	oc := winner.outcome
	return NotaryResult{b.Name, oc.Vote, oc.Kind, oc.Status, winner.host, oc.Detail, elapsed,
		winner.cacheStatus, winner.protocol, oc.Answer}
}
