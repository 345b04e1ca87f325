package converge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// TLS hooks: put the notaries' verdict into Go's crypto/tls in place of (or on top of) CA
// validation. A client that today sets InsecureSkipVerify (or relies on CA checks) switches
// with a few lines:
//
//	c, _ := converge.NewClient("")                       // discover the configuration
//	hc := &http.Client{Transport: c.Transport(nil, converge.TLSOptions{})}
//	resp, err := hc.Get("https://www.example.org/")      // direct, or via the Proxy setting
//
//	cfg := c.TLSConfig(nil, "www.example.org", 443)       // for one known host
//	conn, err := tls.Dial("tcp", "www.example.org:443", cfg)
//
// The check runs in tls.Config.VerifyConnection, inside the handshake, so it holds for
// every connection net/http makes with that config: direct, tunnelled through an HTTP
// CONNECT proxy (http.Transport.Proxy, HTTPS_PROXY), HTTP/1.1 and HTTP/2 alike.

// NotTrustedError is returned from the TLS handshake when the notaries do not trust the
// peer's certificate (or the check could not be made). Verdict is set when one was reached.
type NotTrustedError struct {
	Host    string
	Port    int
	Verdict *Verdict
	Err     error
}

func (e *NotTrustedError) Error() string {
	if e.Verdict != nil {
		return fmt.Sprintf("converge: %s:%d: certificate not trusted: %s", e.Host, e.Port, e.Verdict.Reason)
	}
	return fmt.Sprintf("converge: %s:%d: certificate not checked: %v", e.Host, e.Port, e.Err)
}

func (e *NotTrustedError) Unwrap() error { return e.Err }

// TLSOptions adjust the hook.
type TLSOptions struct {
	// RequireCA also demands ordinary CA and host name validation (RootCAs of the base
	// config, or the system roots).
	RequireCA bool
}

// VerifyConnection returns a tls.Config.VerifyConnection function asking the notaries about
// the peer's leaf certificate for host:port (host "" = the SNI name of the connection).
// The whole check is bounded by the configuration's total-timeout.
func (c *Client) VerifyConnection(host string, port int, opts TLSOptions, roots *x509.CertPool) func(tls.ConnectionState) error {
	return c.verifyConnection(context.Background(), host, port, opts, roots)
}

// verifyConnection is VerifyConnection bounded by ctx as well as by total-timeout.
func (c *Client) verifyConnection(ctx context.Context, host string, port int, opts TLSOptions, roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		h := host
		if h == "" {
			h = cs.ServerName
		}
		if len(cs.PeerCertificates) == 0 {
			return &NotTrustedError{Host: h, Port: port, Err: errors.New("no peer certificate")}
		}
		if opts.RequireCA {
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				DNSName: h, Roots: roots, Intermediates: inter,
			}); err != nil {
				return &NotTrustedError{Host: h, Port: port, Err: err}
			}
		}
		ctx, cancel := context.WithTimeout(ctx, seconds(c.Config.TotalTimeout)+time.Second)
		defer cancel()
		v, err := c.CheckCertificate(ctx, h, port, cs.PeerCertificates[0].Raw)
		if err != nil {
			return &NotTrustedError{Host: h, Port: port, Err: err}
		}
		if !v.Trusted {
			return &NotTrustedError{Host: h, Port: port, Verdict: &v}
		}
		return nil
	}
}

// TLSConfigWith is TLSConfig with options.
func (c *Client) TLSConfigWith(base *tls.Config, host string, port int, opts TLSOptions) *tls.Config {
	return c.tlsConfig(context.Background(), base, host, port, opts)
}

func (c *Client) tlsConfig(ctx context.Context, base *tls.Config, host string, port int, opts TLSOptions) *tls.Config {
	var cfg *tls.Config
	if base == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	} else {
		cfg = base.Clone()
	}
	if cfg.ServerName == "" && net.ParseIP(host) == nil {
		cfg.ServerName = host
	}
	roots := cfg.RootCAs
	// The notaries (and, with RequireCA, the chain check above) replace the default checks.
	cfg.InsecureSkipVerify = true //nolint:gosec
	cfg.VerifyConnection = c.verifyConnection(ctx, host, port, opts, roots)
	return cfg
}

// TLSConfig returns a copy of base (nil: a fresh config) whose certificate check asks the
// notaries about host:port instead of CA validation.
func (c *Client) TLSConfig(base *tls.Config, host string, port int) *tls.Config {
	return c.TLSConfigWith(base, host, port, TLSOptions{})
}

// DialTLSContext returns a dialer for http.Transport.DialTLSContext that checks every
// connection's certificate with the notaries (host and port taken from the address), bounded
// by the dial's context. net/http does not call DialTLSContext for a connection through a
// proxy (it dials the proxy and runs TLS itself): prefer Transport, which covers both.
func (c *Client) DialTLSContext(base *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return c.DialTLSContextWith(base, TLSOptions{})
}

// DialTLSContextWith is DialTLSContext with options.
func (c *Client) DialTLSContextWith(base *tls.Config, opts TLSOptions) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, portText, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		port, err := strconv.Atoi(portText)
		if err != nil {
			return nil, err
		}
		var d net.Dialer
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		conn := tls.Client(raw, c.tlsConfig(ctx, base, host, port, opts))
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	}
}

// Transport returns an http.RoundTripper whose HTTPS connections are checked by the
// notaries for each request's origin host:port, in the TLS handshake (VerifyConnection),
// before the request is written. base (nil: a clone of http.DefaultTransport) keeps its
// settings: Proxy (an HTTP CONNECT proxy: the origin is still what is checked), timeouts,
// HTTP/2, RootCAs for RequireCA. A DialTLSContext or DialTLS of base is dropped, so that no
// connection can bypass the check.
func (c *Client) Transport(base *http.Transport, opts TLSOptions) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport.(*http.Transport)
	}
	return &transport{c: c, base: base.Clone(), opts: opts, byPort: map[string]*http.Transport{}}
}

// transport keeps one http.Transport per origin port (a tls.Config knows the connection's
// server name but not its port), each with a VerifyConnection bound to that port; for an IP
// address in the URL (no server name is sent, so the handshake cannot tell it) one per
// address and port. Pools are per host:port anyway, so the split shares nothing less.
type transport struct {
	c      *Client
	base   *http.Transport
	opts   TLSOptions
	mu     sync.Mutex
	byPort map[string]*http.Transport
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.URL.Scheme != "https" {
		return t.base.RoundTrip(req)
	}
	port := 443
	if p := req.URL.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return nil, badInput(KindTarget, "bad port in %q", req.URL.Host)
		}
		port = n
	}
	host := ""
	if h := req.URL.Hostname(); net.ParseIP(h) != nil {
		host = h
	}
	return t.forOrigin(host, port).RoundTrip(req)
}

func (t *transport) forOrigin(host string, port int) *http.Transport {
	key := net.JoinHostPort(host, strconv.Itoa(port))
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr := t.byPort[key]; tr != nil {
		return tr
	}
	tr := t.base.Clone()
	tr.DialTLSContext = nil
	tr.DialTLS = nil            //nolint:staticcheck // dropped so that nothing bypasses the check
	tr.ForceAttemptHTTP2 = true // a custom TLS config would otherwise turn HTTP/2 off
	tr.TLSClientConfig = t.c.TLSConfigWith(tr.TLSClientConfig, host, port, t.opts)
	t.byPort[key] = tr
	return tr
}

// CloseIdleConnections closes the idle connections of every per-origin transport.
func (t *transport) CloseIdleConnections() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.base.CloseIdleConnections()
	for _, tr := range t.byPort {
		tr.CloseIdleConnections()
	}
}
