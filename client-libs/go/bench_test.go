package converge

import (
	"context"
	"crypto/tls"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Benchmarks: the local-cache hit and loopback notary round trips, each next to a baseline
// measured in the same run. Every benchmark reports p50 and p99 per operation (µs) besides
// Go's mean ns/op.
//
//	go test -run '^$' -bench . -benchtime 2000x               # in-process notary-like servers
//	CONVERGE_BENCH_REAL=1 go test -run '^$' -bench Notary -benchtime 300x
//	                                                          # real `notary serve` processes
//
// With CONVERGE_BENCH_REAL=1 three `notary serve` processes (NOTARY, default
// ../../.venv/bin/notary) are started on 127.0.0.1 and their bundles written by
// `notary bundle`, as bench/client/bench_client.py does for the Python client.

type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	q := func(p float64) float64 {
		return float64(l[minInt(len(l)-1, int(p*float64(len(l))))].Nanoseconds()) / 1000
	}
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

// timed runs fn b.N times, recording each duration.
func timed(b *testing.B, fn func() error) {
	b.Helper()
	l := make(latencies, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		l = append(l, time.Since(t0))
	}
	b.StopTimer()
	l.report(b)
}

func cachedClient(b *testing.B) (*Client, string, int, string) {
	b.Helper()
	d := writeConfig(b, map[string]any{"cache-lifetime": 3600})
	c, err := NewClient(d)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	fp := "8F:C0:79:E8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2A:F7:1A:EB"
	if err := c.remember("www.example.org:443", []Fingerprint{mustFP(fp)}, c.now()); err != nil {
		b.Fatal(err)
	}
	return c, "www.example.org", 443, fp
}

func mustFP(s string) Fingerprint {
	fp, err := ParseFingerprint(s)
	if err != nil {
		panic(err)
	}
	return fp
}

func BenchmarkCacheHit(b *testing.B) {
	c, host, port, fp := cachedClient(b)
	ctx := context.Background()
	timed(b, func() error {
		v, err := c.Check(ctx, host, port, fp)
		if err == nil && !v.FromCache {
			err = fmt.Errorf("not a cache hit")
		}
		return err
	})
}

func BenchmarkCacheHitConvergeFunction(b *testing.B) {
	c, host, port, fp := cachedClient(b)
	b.Setenv(ConfigEnvVar, c.Config.Directory)
	ctx := context.Background()
	timed(b, func() error {
		v, err := Converge(ctx, host, port, fp)
		if err == nil && !v.FromCache {
			err = fmt.Errorf("not a cache hit")
		}
		return err
	})
}

// Baseline: the bare indexed SELECT on an open connection (the floor of a cache hit).
func BenchmarkCacheBaselineBareSelect(b *testing.B) {
	c, host, port, fp := cachedClient(b)
	caches, _ := c.openCaches()
	loc := Location(host, port)
	timed(b, func() error {
		_, err := caches[0].Lookup(loc, fp)
		return err
	})
}

// Baseline: open the database, SELECT, close, per validation (the 2014 study's client).
func BenchmarkCacheBaselineReopenPerValidation(b *testing.B) {
	c, host, port, fp := cachedClient(b)
	path := c.Config.DB
	loc := Location(host, port)
	timed(b, func() error {
		db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath())
		if err != nil {
			return err
		}
		defer db.Close()
		var ts int64
		return db.QueryRow("SELECT timestamp FROM fingerprints WHERE location = ? AND fingerprint = ?", loc, fp).Scan(&ts)
	})
}

// ---------------------------------------------------------------- notary round trips

type benchNotaries struct {
	bundles    []*Bundle
	targetPort int
	sha1       string
	cleanup    func()
}

var (
	benchOwner processOwner
	benchOnce  sync.Once
	benchEnv   *benchNotaries
	benchErr   error
)

func notaries(b *testing.B) *benchNotaries {
	benchOnce.Do(func() {
		if os.Getenv("CONVERGE_BENCH_REAL") != "" {
			benchEnv, benchErr = realNotaries(b)
		} else {
			benchEnv, benchErr = fakeNotaries(b)
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchEnv
}

// fakeNotaries: three in-process notary-like servers (helpers_test.go), legacy only. They
// outlive the benchmark that created them (closed by TestMain).
func fakeNotaries(b *testing.B) (*benchNotaries, error) {
	t := &benchOwner
	genuine := makeCert(b, 0, "target.test", "127.0.0.1")
	port := targetServer(t, genuine)
	env := &benchNotaries{targetPort: port, sha1: FingerprintOf(genuine.der, "sha1").ColonHex()}
	for i := 0; i < 3; i++ {
		n := startNotary(t, "127.0.0.1:0", makeCert(b, 2+i%2, fmt.Sprintf("notary-%d.test", i)))
		n.sees(fmt.Sprintf("127.0.0.1:%d", port), genuine.der)
		bd, err := ParseBundle([]byte(n.bundle(fmt.Sprintf("Org %c", 'A'+i), "127.0.0.1", 1)))
		if err != nil {
			return nil, err
		}
		env.bundles = append(env.bundles, bd)
	}
	return env, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// realNotaries starts three `notary serve` processes and a TLS target in process.
func realNotaries(b *testing.B) (*benchNotaries, error) {
	exe := os.Getenv("NOTARY")
	if exe == "" {
		exe, _ = filepath.Abs(filepath.Join("..", "..", ".venv", "bin", "notary"))
	}
	if _, err := os.Stat(exe); err != nil {
		return nil, fmt.Errorf("notary console script: %v", err)
	}
	t := &benchOwner
	genuine := makeCert(b, 0, "target.test", "127.0.0.1")
	tport := targetServer(t, genuine)
	env := &benchNotaries{targetPort: tport, sha1: FingerprintOf(genuine.der, "sha1").ColonHex()}
	tmp, err := os.MkdirTemp("", "converge-go-bench-")
	if err != nil {
		return nil, err
	}
	var procs []*exec.Cmd
	env.cleanup = func() {
		for _, p := range procs {
			p.Process.Kill()
			p.Wait()
		}
		os.RemoveAll(tmp)
	}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("Org-%c", 'A'+i)
		dir := filepath.Join(tmp, name)
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		p := exec.Command(exe, "serve", "--data-dir", dir, "--listen", fmt.Sprintf("127.0.0.1:%d", port),
			"--allow-target", "127.0.0.0/8")
		log, _ := os.Create(filepath.Join(tmp, name+".log"))
		p.Stdout, p.Stderr = log, log
		if err := p.Start(); err != nil {
			return nil, err
		}
		procs = append(procs, p)
		ready := false
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec
			if err == nil {
				c.Close()
				ready = true
				break
			}
		}
		if !ready {
			env.cleanup()
			return nil, fmt.Errorf("notary %s did not start", name)
		}
		out := filepath.Join(tmp, name+".notary")
		if msg, err := exec.Command(exe, "bundle", "--data-dir", dir, "--host", "127.0.0.1", "--ssl-port",
			strconv.Itoa(port), "--name", name, "-o", out).CombinedOutput(); err != nil {
			env.cleanup()
			return nil, fmt.Errorf("notary bundle: %v: %s", err, msg)
		}
		data, _ := os.ReadFile(out)
		bd, err := ParseBundle(data)
		if err != nil {
			env.cleanup()
			return nil, err
		}
		env.bundles = append(env.bundles, bd)
	}
	return env, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if benchEnv != nil && benchEnv.cleanup != nil {
		benchEnv.cleanup()
	}
	benchOwner.close()
	os.Exit(code)
}

func roundTripClient(b *testing.B, n int, settings func(*Config)) (*Client, *benchNotaries) {
	env := notaries(b)
	cfg := DefaultConfig()
	cfg.Bundles = env.bundles[:n]
	cfg.Extended = ExtendedOff
	if settings != nil {
		settings(&cfg)
	}
	c := NewClientFromConfig(cfg) // no DB: every check asks the notaries
	v, err := c.Check(context.Background(), "127.0.0.1", env.targetPort, env.sha1)
	if err != nil || !v.Trusted || len(v.Results) != n {
		b.Fatalf("warm-up check: %+v %v", v, err)
	}
	return c, env
}

func benchRoundTrip(b *testing.B, n int, settings func(*Config)) {
	c, env := roundTripClient(b, n, settings)
	ctx := context.Background()
	timed(b, func() error {
		v, err := c.Check(ctx, "127.0.0.1", env.targetPort, env.sha1)
		if err == nil && !v.Trusted {
			err = fmt.Errorf("not trusted: %s", kinds(v))
		}
		return err
	})
}

func BenchmarkNotaryRoundTripOne(b *testing.B) { benchRoundTrip(b, 1, nil) }

func BenchmarkNotaryRoundTripOneExtended(b *testing.B) {
	if !notaries(b).bundles[0].OffersExtended() {
		b.Skip("the notaries' bundles do not offer converge-answer/1 (in-process servers are legacy)")
	}
	benchRoundTrip(b, 1, func(c *Config) { c.Extended = ExtendedPrefer })
}

func BenchmarkNotaryRoundTripThreeWaitAll(b *testing.B) {
	benchRoundTrip(b, 3, func(c *Config) { c.EarlyReturn = false })
}

func BenchmarkNotaryRoundTripThreeEarlyReturn(b *testing.B) {
	benchRoundTrip(b, 3, func(c *Config) { c.EarlyReturn = true })
}

// Baseline: the same TLS connect + legacy request + read by hand, without the pin, the
// parsing or the signature check.
func BenchmarkNotaryRoundTripBaselineRawTLS(b *testing.B) {
	env := notaries(b)
	h := env.bundles[0].Hosts[0]
	req, _ := RequestBytes("127.0.0.1", env.targetPort, mustFP(env.sha1), "")
	addr := net.JoinHostPort(h.Host, strconv.Itoa(h.SSLPort))
	timed(b, func() error { return bareRequest(addr, req, nil) })
}

// bareRequest: a new TLS connection to addr (resuming a session of sessions when not nil),
// req written, the response read to its end.
func bareRequest(addr string, req []byte, sessions tls.ClientSessionCache) error {
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ClientSessionCache: sessions}) //nolint:gosec
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(req); err != nil {
		return err
	}
	_, err = io.ReadAll(io.LimitReader(c, 1<<20))
	if err != nil && err != io.ErrUnexpectedEOF {
		return err
	}
	return nil
}

// BenchmarkNotaryRoundTripPaired: the bare TLS request (the baseline above), one legacy
// check and one extended check (when the bundle offers it) in turn, the first of each round
// rotating, so all three see the same moments of a shared machine's load. Reports each one's
// p50 and the median over rounds of each check's time over the bare request's in that round
// (ratio-legacy, ratio-extended; ratio-raw-extended: the bare request carrying the extended
// request instead, which costs the notary more; ratio-extended-over-raw-extended: the extended
// check over that request): the figure for "a check that asks its notary costs at most
// 1.3x a bare TLS request to it" (bench/client/bench_client.py measures Python the same way).
// The extended check keeps its connection to the notary between rounds (the default);
// extended-new-connection is the same check with DisableKeepAlives, a new TLS connection
// every time, resuming the TLS session of the one before (ratio-extended-new-connection;
// raw-extended-resumed: the bare extended request resuming its session likewise).
func BenchmarkNotaryRoundTripPaired(b *testing.B) {
	legacy, env := roundTripClient(b, 1, nil)
	var ext, extNew *Client
	if env.bundles[0].OffersExtended() {
		ext, _ = roundTripClient(b, 1, func(c *Config) { c.Extended = ExtendedPrefer })
		extNew, _ = roundTripClient(b, 1, func(c *Config) { c.Extended, c.DisableKeepAlives = ExtendedPrefer, true })
	}
	h := env.bundles[0].Hosts[0]
	req, _ := RequestBytes("127.0.0.1", env.targetPort, mustFP(env.sha1), "")
	addr := net.JoinHostPort(h.Host, strconv.Itoa(h.SSLPort))
	ctx := context.Background()
	bare := func(request func() ([]byte, error), sessions tls.ClientSessionCache) func() error {
		return func() error {
			r, err := request()
			if err != nil {
				return err
			}
			return bareRequest(addr, r, sessions)
		}
	}
	raw := bare(func() ([]byte, error) { return req, nil }, nil)
	check := func(c *Client) func() error {
		return func() error {
			v, err := c.Check(ctx, "127.0.0.1", env.targetPort, env.sha1)
			if err == nil && !v.Trusted {
				err = fmt.Errorf("not trusted: %s", kinds(v))
			}
			return err
		}
	}
	names := []string{"raw", "legacy"}
	fns := []func() error{raw, check(legacy)}
	if ext != nil {
		// the bare TLS request carrying the extended request the check sends (a fresh
		// nonce, a proof asked when the bundle names a log)
		proof := env.bundles[0].Transparency != nil
		extRequest := func() ([]byte, error) {
			return extendedRequest("127.0.0.1", env.targetPort, mustFP(env.sha1), NewNonce(), "", proof)
		}
		// and the same on a resumed TLS session, as the check's new connections do
		rawExtResumed := bare(extRequest, tls.NewLRUClientSessionCache(1))
		names = append(names, "extended", "raw-extended", "extended-new-connection", "raw-extended-resumed")
		fns = append(fns, check(ext), bare(extRequest, nil), check(extNew), rawExtResumed)
	}
	times := make([]latencies, len(fns))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range fns {
			k := (i + j) % len(fns)
			t0 := time.Now()
			if err := fns[k](); err != nil {
				b.Fatal(err)
			}
			times[k] = append(times[k], time.Since(t0))
		}
	}
	b.StopTimer()
	medianRatio := func(a, over int) float64 {
		ratios := make([]float64, len(times[a]))
		for i := range ratios {
			ratios[i] = float64(times[a][i]) / float64(times[over][i])
		}
		sort.Float64s(ratios)
		return ratios[len(ratios)/2]
	}
	for k := 1; k < len(fns); k++ {
		b.ReportMetric(medianRatio(k, 0), "ratio-"+names[k])
	}
	if ext != nil { // like for like: the extended check over the bare extended request
		b.ReportMetric(medianRatio(2, 3), "ratio-extended-over-raw-extended")
		b.ReportMetric(medianRatio(4, 3), "ratio-extended-new-connection-over-raw-extended")
		b.ReportMetric(medianRatio(4, 5), "ratio-extended-new-connection-over-raw-extended-resumed")
	}
	for k := range fns {
		l := append(latencies(nil), times[k]...)
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		b.ReportMetric(float64(l[len(l)/2].Nanoseconds())/1000, "p50-µs-"+names[k])
	}
}
