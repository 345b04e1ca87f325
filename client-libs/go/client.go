package converge

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"net"
	"os"
	"sort"
	"sync"
	"time"
)

// Verdict is the decision for one (host, port, fingerprint).
type Verdict struct {
	Trusted     bool
	Host        string
	Port        int
	Fingerprint string // canonical form of the asked fingerprint
	Policy      Policy
	StandAside  bool
	FromCache   bool
	Results     []NotaryResult // in configuration order; empty for a cache hit
	Reason      string
	Elapsed     time.Duration
	Relay       string // the bounce relay's name, "" when none
}

// Client is a configuration plus its open cache connections. Safe for concurrent use; keep
// one per configuration.
type Client struct {
	Config Config
	// Now is the clock (unix seconds); Intn picks notaries at random. Tests replace them.
	Now  func() float64
	Intn func(n int) int
	// Dial, when set, replaces net.Dialer for notary connections (tests).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	mu     sync.Mutex
	pool   connPool // idle extended-format connections and TLS sessions of notaries
	opened bool
	caches []*LocalCache
	writer *LocalCache
	pid    int
}

// NewClient loads the configuration directory (discovered when dir is "").
func NewClient(dir string) (*Client, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	return NewClientFromConfig(cfg), nil
}

// NewClientFromConfig wraps an already built configuration.
func NewClientFromConfig(cfg Config) *Client {
	return &Client{Config: cfg}
}

func (c *Client) now() float64 {
	if c.Now != nil {
		return c.Now()
	}
	return float64(time.Now().UnixNano()) / 1e9
}

func (c *Client) intn(n int) int {
	if c.Intn != nil {
		return c.Intn(n)
	}
	v, err := rand.Int(rand.Reader, big.NewInt(int64(n)))
	if err != nil {
		panic(err)
	}
	return int(v.Int64())
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func (c *Client) openCaches() ([]*LocalCache, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opened && c.pid == os.Getpid() {
		return c.caches, nil
	}
	c.caches, c.writer = nil, nil
	cfg := c.Config
	if cfg.UserDB != "" {
		w, err := OpenCache(cfg.UserDB, false)
		if err != nil {
			return nil, err
		}
		c.writer = w
		c.caches = append(c.caches, w)
	}
	if cfg.DB != "" {
		if c.writer == nil {
			w, err := OpenCache(cfg.DB, false)
			if err != nil {
				return nil, err
			}
			c.writer = w
			c.caches = append(c.caches, w)
		} else if fileExists(cfg.DB) {
			// an unreadable shared cache only costs notary queries
			if r, err := OpenCache(cfg.DB, true); err == nil {
				c.caches = append(c.caches, r)
			}
		}
	}
	c.opened, c.pid = true, os.Getpid()
	return c.caches, nil
}

// Close closes the cache connections and the idle notary connections (the client reopens
// them when used again).
func (c *Client) Close() error {
	c.pool.close()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.caches {
		x.Close()
	}
	c.caches, c.writer, c.opened = nil, nil, false
	return nil
}

func (c *Client) cached(loc string, forms []Fingerprint, now float64) (bool, error) {
	caches, err := c.openCaches()
	if err != nil {
		return false, err
	}
	for _, cache := range caches {
		for _, fp := range forms {
			ts, err := cache.Lookup(loc, fp.ColonHex())
			if err != nil {
				return false, err
			}
			if CacheDecision(ts, now, c.Config.CacheLifetime) == "hit" {
				return true, nil
			}
		}
	}
	return false, nil
}

func (c *Client) remember(loc string, forms []Fingerprint, now float64) error {
	if _, err := c.openCaches(); err != nil {
		return err
	}
	c.mu.Lock()
	w := c.writer
	c.mu.Unlock()
	if w == nil {
		return nil
	}
	for _, fp := range forms {
		if err := w.Store(loc, fp.ColonHex(), int64(now)); err != nil {
			return err
		}
	}
	return nil
}

func forms(fingerprint string, certificate []byte) ([]Fingerprint, error) {
	fp, err := ParseFingerprint(fingerprint)
	if err != nil {
		return nil, err
	}
	out := []Fingerprint{fp}
	if certificate != nil {
		for _, alg := range []string{"sha1", "sha256"} {
			alt := FingerprintOf(certificate, alg)
			if alt.Algorithm == fp.Algorithm && !alt.Equal(fp) {
				return nil, badInput(KindFingerprint, "the certificate does not match the fingerprint")
			}
			dup := false
			for _, f := range out {
				dup = dup || f.Equal(alt)
			}
			if !dup {
				out = append(out, alt)
			}
		}
	}
	return out, nil
}

// Check asks for a verdict on (host, port, fingerprint). A local cache hit costs one indexed
// SQLite lookup. Errors are bad input (fingerprint, target, configuration) or cache IO;
// notary failures are votes in the verdict.
func (c *Client) Check(ctx context.Context, host string, port int, fingerprint string) (Verdict, error) {
	return c.CheckWith(ctx, host, port, fingerprint, CheckOptions{})
}

// CheckOptions are the optional arguments of a check.
type CheckOptions struct {
	// Certificate (DER): the cache and the notaries' lists are matched by SHA-1 and SHA-256.
	Certificate []byte
	// IP asks the notaries to connect to this address (the one the caller connected to)
	// with host as SNI; extended answers must name it.
	IP string
}

// CheckWith is Check with options.
func (c *Client) CheckWith(ctx context.Context, host string, port int, fingerprint string, opts CheckOptions) (Verdict, error) {
	return c.check(ctx, host, port, fingerprint, opts.Certificate, opts.IP)
}

// CheckCertificate is Check with the DER certificate: the cache and the notaries' lists are
// then matched by SHA-1 and SHA-256 both.
func (c *Client) CheckCertificate(ctx context.Context, host string, port int, der []byte) (Verdict, error) {
	return c.check(ctx, host, port, FingerprintOf(der, "sha1").ColonHex(), der, "")
}

func (c *Client) check(ctx context.Context, host string, port int, fingerprint string, der []byte, ip string) (Verdict, error) {
	t0 := time.Now()
	if err := ctx.Err(); err != nil {
		return Verdict{}, err
	}
	if err := CheckTarget(host, port); err != nil {
		return Verdict{}, err
	}
	if ip != "" {
		if _, err := CheckIP(ip); err != nil {
			return Verdict{}, err
		}
	}
	fps, err := forms(fingerprint, der)
	if err != nil {
		return Verdict{}, err
	}
	loc := Location(host, port)
	hit, err := c.cached(loc, fps, c.now())
	if err != nil {
		return Verdict{}, err
	}
	cfg := &c.Config
	if hit {
		return Verdict{Trusted: true, Host: host, Port: port, Fingerprint: fps[0].ColonHex(),
			Policy: cfg.Agreement, StandAside: cfg.StandAside, FromCache: true,
			Reason: "local cache hit", Elapsed: time.Since(t0)}, nil
	}
	return c.ask(ctx, host, port, fps, t0, ip)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func (c *Client) ask(ctx context.Context, host string, port int, fps []Fingerprint, t0 time.Time, ip string) (Verdict, error) {
	cfg := &c.Config
	notaries, err := cfg.Notaries()
	if err != nil {
		return Verdict{}, err
	}
	if len(notaries) == 0 {
		return Verdict{}, badInput(KindConfig, "no notaries enabled (looked in %s)",
			WhereNotariesAreRead(cfg.NotariesDir))
	}
	if cfg.Extended == ExtendedRequire {
		var offering []*Bundle
		for _, b := range notaries {
			if b.OffersExtended() {
				offering = append(offering, b)
			}
		}
		if len(offering) == 0 {
			return Verdict{}, badInput(KindConfig, "extended is require but no enabled notary's bundle offers %s", ExtendedFormat)
		}
		notaries = offering
	}
	var relay *Bundle
	if cfg.Bounce {
		if len(notaries) < 2 {
			return Verdict{}, badInput(KindConfig, "bounce needs two enabled notaries: one relays, one votes")
		}
		i := c.intn(len(notaries))
		relay = notaries[i]
		notaries = append(append([]*Bundle{}, notaries[:i]...), notaries[i+1:]...)
	}
	// a random sample of quorum notaries, reported in configuration order
	idx := make([]int, len(notaries))
	for i := range idx {
		idx[i] = i
	}
	k := minInt(cfg.Quorum, len(notaries))
	for i := 0; i < k; i++ {
		j := i + c.intn(len(idx)-i)
		idx[i], idx[j] = idx[j], idx[i]
	}
	picked := idx[:k]
	sort.Ints(picked)
	chosen := make([]*Bundle, k)
	for i, p := range picked {
		chosen[i] = notaries[p]
	}

	tctx, cancel := context.WithTimeout(ctx, seconds(cfg.TotalTimeout))
	defer cancel()
	opts := queryOpts{connectTimeout: seconds(cfg.ConnectTimeout), maxBytes: cfg.MaxResponseBytes,
		relay: relay, bouncePort: cfg.BouncePort, dialer: c.Dial, ip: ip}
	opts.pool, opts.keepAlive = &c.pool, !cfg.DisableKeepAlives
	type indexed struct {
		i int
		r NotaryResult
	}
	done := make(chan indexed, k)
	for i, b := range chosen {
		o := opts
		if cfg.Extended != ExtendedOff && b.OffersExtended() {
			o.ext = &extQuery{keys: b.SigningKeys, nonce: cfg.ExtendedNonce, maxSkew: cfg.MaxSkew,
				fallback: cfg.Extended == ExtendedFallback && b.Transparency == nil, now: c.now, log: b.Transparency}
		}
		go func(i int, b *Bundle, o queryOpts) {
			done <- indexed{i, askNotary(tctx, b, host, port, fps, seconds(cfg.NotaryTimeout), o)}
		}(i, b, o)
	}
	results := make([]*NotaryResult, k)
	pending := k
	verdict, settled := false, false
	timedOut := false
collect:
	for pending > 0 {
		select {
		case x := <-done:
			r := x.r
			results[x.i] = &r
			pending--
			if cfg.EarlyReturn {
				var votes []Vote
				for _, r := range results {
					if r != nil {
						votes = append(votes, r.Vote)
					}
				}
				verdict, settled, _ = Settled(cfg.Agreement, votes, pending, cfg.StandAside)
				if settled {
					break collect
				}
			}
		case <-tctx.Done():
			timedOut = true
			break collect
		}
	}
	cancel()
	if err := ctx.Err(); err != nil {
		// the caller gave up (cancelled, or its deadline passed): no verdict, its error
		return Verdict{}, err
	}
	ordered := make([]NotaryResult, k)
	var votes []Vote
	for i, r := range results {
		switch {
		case r != nil:
			ordered[i] = *r
		case timedOut:
			ordered[i] = NotaryResult{Name: chosen[i].Name, Vote: VoteUnreachable, Kind: KindTimeout,
				Detail: fmt.Sprintf("no answer within %g s", cfg.TotalTimeout), Elapsed: time.Since(t0)}
		default:
			ordered[i] = NotaryResult{Name: chosen[i].Name, Vote: VoteSkipped, Kind: "settled",
				Detail: "verdict settled before this notary answered"}
		}
		if ordered[i].Vote != VoteSkipped {
			votes = append(votes, ordered[i].Vote)
		}
	}
	if !settled || timedOut {
		verdict, _ = Decide(cfg.Agreement, votes, cfg.StandAside)
	}
	s := 0
	for _, v := range votes {
		if v == VoteSuccess {
			s++
		}
	}
	aside := "unreachable count as failure"
	if cfg.StandAside {
		aside = "unreachable stand aside"
	}
	if verdict {
		if err := c.remember(Location(host, port), fps, c.now()); err != nil {
			return Verdict{}, err
		}
	}
	v := Verdict{Trusted: verdict, Host: host, Port: port, Fingerprint: fps[0].ColonHex(),
		Policy: cfg.Agreement, StandAside: cfg.StandAside, Results: ordered,
		Reason:  fmt.Sprintf("%d of %d notaries confirm (%s, %s)", s, k, cfg.Agreement, aside),
		Elapsed: time.Since(t0)}
	if relay != nil {
		v.Relay = relay.Name
	}
	return v, nil
}

var (
	sharedMu      sync.Mutex
	sharedClients = map[string]*Client{}
)

// Converge asks whether fingerprint (SHA-1 or SHA-256, any case, colons optional) is the
// certificate the notaries see for host:port, with the discovered configuration
// ($CONVERGE_CONFIG_DIR, ~/.config/converge, /usr/local/etc/converge). The client behind it
// is kept open across calls.
func Converge(ctx context.Context, host string, port int, fingerprint string) (Verdict, error) {
	key := "env:" + os.Getenv(ConfigEnvVar)
	sharedMu.Lock()
	c := sharedClients[key]
	if c == nil {
		var err error
		if c, err = NewClient(""); err != nil {
			sharedMu.Unlock()
			return Verdict{}, err
		}
		sharedClients[key] = c
	}
	sharedMu.Unlock()
	return c.Check(ctx, host, port, fingerprint)
}
