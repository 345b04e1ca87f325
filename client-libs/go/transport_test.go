package converge

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The TLS hook behind an HTTP CONNECT proxy, on ports other than 443, over HTTP/2, and with
// the caller's context. The site "site.test" listens on port P: the genuine server on
// 127.0.0.1:P and a forged one on 127.0.0.2:P whose certificate the client's RootCAs trust
// (a mis-issued certificate). The notaries see the genuine certificate at site.test:P.

type connectProxy struct {
	port     int
	mu       sync.Mutex
	connects []string
}

// startConnectProxy tunnels CONNECT host:port to routes[host]:port.
func startConnectProxy(t *testing.T, routes map[string]string) *connectProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &connectProxy{port: ln.Addr().(*net.TCPAddr).Port}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.handle(c, routes)
		}
	}()
	return p
}

func (p *connectProxy) handle(c net.Conn, routes map[string]string) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	for {
		h, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if h == "\r\n" {
			break
		}
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "CONNECT" {
		c.Write([]byte("HTTP/1.1 405 Method Not Allowed\r\n\r\n"))
		return
	}
	host, port, err := net.SplitHostPort(f[1])
	if err != nil {
		return
	}
	p.mu.Lock()
	p.connects = append(p.connects, f[1])
	p.mu.Unlock()
	if a, ok := routes[host]; ok {
		host = a
	}
	up, err := net.Dial("tcp", net.JoinHostPort(host, port))
	if err != nil {
		c.Write([]byte("HTTP/1.1 502 Bad Gateway\r\n\r\n"))
		return
	}
	defer up.Close()
	c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	go io.Copy(up, r)
	io.Copy(c, up)
}

func (p *connectProxy) url() *url.URL {
	return &url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", p.port)}
}

// httpsServer serves body on addr (HTTP/1.1 and HTTP/2); wrote counts requests received.
type httpsServer struct {
	port  int
	mu    sync.Mutex
	wrote int
	proto string
}

func startHTTPS(t *testing.T, addr string, cert testCert, body string) *httpsServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &httpsServer{port: ln.Addr().(*net.TCPAddr).Port}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.wrote++
		s.proto = r.Proto
		s.mu.Unlock()
		io.WriteString(w, body)
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert.cert}, NextProtos: []string{"h2", "http/1.1"}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return s
}

func (s *httpsServer) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wrote
}

type proxyScene struct {
	genuine, forged testCert
	good, evil      *httpsServer
	goodPx, evilPx  *connectProxy
	notaries        []*fakeNotary
	port            int
	roots           *x509.CertPool
	url             string
}

func newProxyScene(t *testing.T) *proxyScene {
	sc := &proxyScene{genuine: makeCert(t, 0, "site.test", "127.0.0.1"), forged: makeCert(t, 1, "site.test", "127.0.0.1")}
	sc.good = startHTTPS(t, "127.0.0.1:0", sc.genuine, "genuine")
	sc.port = sc.good.port
	sc.evil = startHTTPS(t, fmt.Sprintf("127.0.0.2:%d", sc.port), sc.forged, "forged")
	sc.goodPx = startConnectProxy(t, map[string]string{"site.test": "127.0.0.1"})
	sc.evilPx = startConnectProxy(t, map[string]string{"site.test": "127.0.0.2"})
	for i := 0; i < 2; i++ {
		n := startNotary(t, "127.0.0.1:0", makeCert(t, 2+i, fmt.Sprintf("notary-%d.test", i)))
		n.sees(fmt.Sprintf("site.test:%d", sc.port), sc.genuine.der)
		sc.notaries = append(sc.notaries, n)
	}
	// the client's CAs accept both certificates: only the notaries tell them apart
	sc.roots = x509.NewCertPool()
	sc.roots.AddCert(mustParse(t, sc.genuine.der))
	sc.roots.AddCert(mustParse(t, sc.forged.der))
	sc.url = fmt.Sprintf("https://site.test:%d/", sc.port)
	return sc
}

func mustParse(t *testing.T, der []byte) *x509.Certificate {
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (sc *proxyScene) client(t *testing.T) *Client {
	var bundles []string
	for i, n := range sc.notaries {
		bundles = append(bundles, n.bundle(fmt.Sprintf("Org %c", 'A'+i), "127.0.0.1", 1))
	}
	c, err := NewClient(writeConfig(t, map[string]any{"cache-lifetime": 0}, bundles...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (sc *proxyScene) asked() []string {
	var out []string
	for _, n := range sc.notaries {
		n.mu.Lock()
		out = append(out, n.asked...)
		n.mu.Unlock()
	}
	return out
}

func get(hc *http.Client, u string) (string, error) {
	resp, err := hc.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestTransportThroughAProxy(t *testing.T) {
	sc := newProxyScene(t)
	c := sc.client(t)
	base := &http.Transport{Proxy: http.ProxyURL(sc.goodPx.url()), TLSClientConfig: &tls.Config{RootCAs: sc.roots}}
	hc := &http.Client{Transport: c.Transport(base, TLSOptions{}), Timeout: 20 * time.Second}
	body, err := get(hc, sc.url)
	if err != nil || body != "genuine" {
		t.Fatalf("genuine through the proxy: %q %v", body, err)
	}
	want := fmt.Sprintf("/target/site.test+%d", sc.port)
	for _, a := range sc.asked() {
		if a != want {
			t.Fatalf("the notaries were asked %q, want the origin %q", a, want)
		}
	}
	base = &http.Transport{Proxy: http.ProxyURL(sc.evilPx.url()), TLSClientConfig: &tls.Config{RootCAs: sc.roots}}
	hc = &http.Client{Transport: c.Transport(base, TLSOptions{}), Timeout: 20 * time.Second}
	_, err = get(hc, sc.url)
	var nt *NotTrustedError
	if !errors.As(err, &nt) || nt.Verdict == nil || nt.Verdict.Trusted || nt.Port != sc.port || nt.Host != "site.test" {
		t.Fatalf("the forged server through the attacker's proxy: %v", err)
	}
	if sc.evil.requests() != 0 {
		t.Fatal("the request reached the forged server")
	}
}

// Twin: what the hook replaces. DialTLSContext (the older hook) is not used by net/http for
// proxied connections, and plain CA validation accepts the forged server.
func TestTwinDialTLSContextIsBypassedByAProxy(t *testing.T) {
	sc := newProxyScene(t)
	c := sc.client(t)
	tr := &http.Transport{Proxy: http.ProxyURL(sc.evilPx.url()), TLSClientConfig: &tls.Config{RootCAs: sc.roots},
		DialTLSContext: c.DialTLSContext(nil)}
	body, err := get(&http.Client{Transport: tr, Timeout: 20 * time.Second}, sc.url)
	if err != nil || body != "forged" {
		t.Fatalf("expected the bypass this test documents: %q %v", body, err)
	}
}

func TestTransportDirectOnAnotherPortAndHTTP2(t *testing.T) {
	w := newWorld(t, 2, false)
	c := w.client(t, nil)
	srv := startHTTPS(t, "127.0.0.1:0", w.genuine, "h2 ok")
	for _, n := range w.notaries {
		n.sees(fmt.Sprintf("127.0.0.1:%d", srv.port), w.genuine.der)
	}
	hc := &http.Client{Transport: c.Transport(nil, TLSOptions{}), Timeout: 20 * time.Second}
	resp, err := hc.Get(fmt.Sprintf("https://127.0.0.1:%d/", srv.port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("HTTP/2 was not negotiated: %s", resp.Proto)
	}
	// twin: the notaries see something else at that port
	for _, n := range w.notaries {
		n.sees(fmt.Sprintf("127.0.0.1:%d", srv.port), w.forged.der)
	}
	hc = &http.Client{Transport: w.client(t, nil).Transport(nil, TLSOptions{}), Timeout: 20 * time.Second}
	if _, err := hc.Get(fmt.Sprintf("https://127.0.0.1:%d/", srv.port)); err == nil {
		t.Fatal("accepted a certificate the notaries do not see")
	}
}

func TestCancelledContextIsAnErrorNotAVerdict(t *testing.T) {
	w := newWorld(t, 2, false)
	for _, n := range w.notaries {
		n.silent = true
	}
	c := w.client(t, map[string]any{"total-timeout": 10, "notary-timeout": 10})
	fp := FingerprintOf(w.genuine.der, "sha1").ColonHex()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err := c.Check(ctx, "127.0.0.1", w.targetPort, fp)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the context's error, got %v", err)
	}
	if time.Since(t0) > 3*time.Second {
		t.Fatalf("the check outlived its context: %v", time.Since(t0))
	}
	cancelled, stop := context.WithCancel(context.Background())
	stop()
	if _, err := c.Check(cancelled, "127.0.0.1", w.targetPort, fp); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	// twin: with a live context the silent notaries give an untrusted verdict, no error
	c2 := w.client(t, map[string]any{"total-timeout": 1, "notary-timeout": 1})
	v, err := c2.Check(context.Background(), "127.0.0.1", w.targetPort, fp)
	if err != nil || v.Trusted {
		t.Fatalf("want an untrusted verdict: %+v %v", v, err)
	}
}

func TestDialTLSContextHonoursTheDialContext(t *testing.T) {
	w := newWorld(t, 1, false)
	w.notaries[0].silent = true
	c := w.client(t, map[string]any{"total-timeout": 10, "notary-timeout": 10})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err := c.DialTLSContext(nil)(ctx, "tcp", w.loc())
	if err == nil || time.Since(t0) > 3*time.Second {
		t.Fatalf("the dial was not bounded by its context: %v after %v", err, time.Since(t0))
	}
}

// Issue 37: a TLS session resumed on another port of the same host, and a redirect to that
// port, are checked again for that port. Ports Q and P serve one certificate from one TLS
// config (one session ticket key, as one attacker's box would); the client shares one session
// cache. The notaries see that certificate at Q and another one at P.
func TestSessionsAndRedirectsAcrossPortsAreCheckedForTheirPort(t *testing.T) {
	w := newWorld(t, 2, false)
	shared := &tls.Config{Certificates: []tls.Certificate{w.genuine.cert}, SessionTicketKey: [32]byte{7}}
	serve := func(h http.HandlerFunc) (int, *int32) {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", shared)
		if err != nil {
			t.Fatal(err)
		}
		var hits int32
		srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			atomic.AddInt32(&hits, 1)
			h(rw, r)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().(*net.TCPAddr).Port, &hits
	}
	p, pHits := serve(func(rw http.ResponseWriter, r *http.Request) { io.WriteString(rw, "at P") })
	q, _ := serve(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			http.Redirect(rw, r, fmt.Sprintf("https://127.0.0.1:%d/", p), http.StatusFound)
			return
		}
		io.WriteString(rw, "at Q")
	})
	view := func(der []byte) {
		for _, n := range w.notaries {
			n.sees(fmt.Sprintf("127.0.0.1:%d", q), w.genuine.der)
			n.sees(fmt.Sprintf("127.0.0.1:%d", p), der)
		}
	}
	view(w.forged.der)
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.TLSClientConfig = &tls.Config{ClientSessionCache: tls.NewLRUClientSessionCache(16)}
	hc := &http.Client{Transport: w.client(t, map[string]any{"cache-lifetime": 0}).Transport(base, TLSOptions{}),
		Timeout: 20 * time.Second}
	get := func(url string) (string, *http.Response, error) {
		resp, err := hc.Get(url)
		if err != nil {
			return "", nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), resp, nil
	}
	// a new connection to Q leaves a fresh session in the cache (a failed handshake drops the
	// session it tried)
	seed := func() {
		hc.CloseIdleConnections()
		if body, _, err := get(fmt.Sprintf("https://127.0.0.1:%d/page", q)); err != nil || body != "at Q" {
			t.Fatalf("the genuine origin Q: %q %v", body, err)
		}
	}
	var nt *NotTrustedError
	for _, url := range []string{fmt.Sprintf("https://127.0.0.1:%d/", q), fmt.Sprintf("https://127.0.0.1:%d/", p)} {
		seed()
		if _, _, err := get(url); !errors.As(err, &nt) || nt.Port != p {
			t.Fatalf("%s: want a refusal for port %d, got %v", url, p, err)
		}
	}
	if atomic.LoadInt32(pHits) != 0 {
		t.Fatal("a request reached P")
	}
	// twin: once the notaries see that certificate at P, the redirect is followed
	seed()
	view(w.genuine.der)
	body, resp, err := get(fmt.Sprintf("https://127.0.0.1:%d/", q))
	if err != nil || body != "at P" {
		t.Fatalf("the vouched redirect: %q %v", body, err)
	}
	// the connection to P resumed the session made at Q (so the refusals above were of
	// resumable handshakes) and was checked all the same
	if !resp.TLS.DidResume {
		t.Fatal("the session from Q was not resumed at P: the case does not test resumption")
	}
}

// Issue 37: code of the same application without the hook uses the base transport (CA
// validation only) and leaves a keep-alive connection in its pool and a TLS session in the
// shared ClientSessionCache. The hooked transport does not reuse that connection (each origin
// has its own pool, cloned from base) and, when it resumes that session, checks it: through
// the attacker's proxy the forged server gets the unhooked request only; through the honest
// proxy (the twin) the hooked request arrives over a new connection that resumed the session
// and was checked (the notaries were asked again).
func TestUnhookedKeepAliveAndSessionAreNotUsedUnchecked(t *testing.T) {
	sc := newProxyScene(t)
	c := sc.client(t)
	for _, tc := range []struct {
		px    *connectProxy
		srv   *httpsServer
		trust bool
	}{{sc.evilPx, sc.evil, false}, {sc.goodPx, sc.good, true}} {
		base := &http.Transport{Proxy: http.ProxyURL(tc.px.url()),
			TLSClientConfig: &tls.Config{RootCAs: sc.roots, ClientSessionCache: tls.NewLRUClientSessionCache(8)}}
		plain := &http.Client{Transport: base, Timeout: 20 * time.Second}
		if body, err := get(plain, sc.url); err != nil || body == "" {
			t.Fatalf("the unhooked request: %q %v", body, err)
		}
		before, asked := tc.srv.requests(), len(sc.asked())
		hc := &http.Client{Transport: c.Transport(base, TLSOptions{}), Timeout: 20 * time.Second}
		resp, err := hc.Get(sc.url)
		if !tc.trust {
			var nt *NotTrustedError
			if !errors.As(err, &nt) || nt.Verdict == nil || nt.Port != sc.port {
				t.Fatalf("the forged server after an unhooked keep-alive: %v", err)
			}
			if tc.srv.requests() != before {
				t.Fatal("the hooked request reached the forged server")
			}
			base.CloseIdleConnections()
			continue
		}
		if err != nil {
			t.Fatalf("the genuine server after an unhooked keep-alive: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "genuine" || !resp.TLS.DidResume || len(sc.asked()) == asked {
			t.Fatalf("want a new, resumed, checked connection: %q resumed=%v asked %d -> %d",
				b, resp.TLS.DidResume, asked, len(sc.asked()))
		}
		base.CloseIdleConnections()
		hc.CloseIdleConnections()
	}
}
