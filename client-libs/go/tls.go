package converge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// TLS hooks: put the notaries' verdict into Go's crypto/tls in place of (or on top of) CA
// validation. A client that today sets InsecureSkipVerify (or relies on CA checks) switches
// with a few lines:
//
//	c, _ := converge.NewClient("")                 // discover the configuration
//	cfg := c.TLSConfig(nil, "www.example.org", 443) // for one known host
//	conn, err := tls.Dial("tcp", "www.example.org:443", cfg)
//
//	tr := &http.Transport{DialTLSContext: c.DialTLSContext(nil)} // any host, per connection
//	resp, err := (&http.Client{Transport: tr}).Get("https://www.example.org/")

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
		ctx, cancel := context.WithTimeout(context.Background(), seconds(c.Config.TotalTimeout)+time.Second)
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
	cfg.VerifyConnection = c.VerifyConnection(host, port, opts, roots)
	return cfg
}

// TLSConfig returns a copy of base (nil: a fresh config) whose certificate check asks the
// notaries about host:port instead of CA validation.
func (c *Client) TLSConfig(base *tls.Config, host string, port int) *tls.Config {
	return c.TLSConfigWith(base, host, port, TLSOptions{})
}

// DialTLSContext returns a dialer for http.Transport.DialTLSContext that checks every
// connection's certificate with the notaries (host and port taken from the address).
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
		conn := tls.Client(raw, c.TLSConfigWith(base, host, port, opts))
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	}
}
