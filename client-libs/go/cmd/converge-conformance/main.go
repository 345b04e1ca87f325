// Command converge-conformance is the conformance CLI of the Go client
// (client-libs/conformance/CLIENT-CLI.md):
//
//	converge-conformance info
//	converge-conformance check --config-dir DIR HOST PORT FINGERPRINT
//	converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] [--path P]
//		[--follow-redirects] [--first URL] [--unhooked-first] HOST PORT
//	converge-conformance vector FILE
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	converge "github.com/converge-notary/converge/client-libs/go"
)

const usage = `usage: converge-conformance check --config-dir DIR HOST PORT FINGERPRINT
       converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] [--path P]
                            [--follow-redirects] [--first URL] [--unhooked-first] HOST PORT
       converge-conformance vector FILE
       converge-conformance info
`

func emit(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	fmt.Fprintf(w, "%s\n", b)
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, out, errOut io.Writer) int {
	switch {
	case len(args) == 1 && args[0] == "info":
		emit(out, map[string]any{"language": "go", "implementation": "github.com/converge-notary/converge/client-libs/go",
			"version": converge.Version, "schemas": converge.VectorSchemas})
		return 0
	case len(args) == 2 && args[0] == "vector":
		return vector(args[1], out, errOut)
	case len(args) == 6 && args[0] == "check" && args[1] == "--config-dir":
		return check(args[2], args[3], args[4], args[5], out)
	case len(args) >= 5 && args[0] == "hook" && args[1] == "--config-dir":
		if code, ok := hook(args[2], args[3:], out); ok {
			return code
		}
	}
	fmt.Fprint(errOut, usage)
	return 2
}

func vector(path string, out, errOut io.Writer) int {
	f, err := os.Open(path)
	if err != nil {
		emit(out, map[string]any{"error": "usage", "message": err.Error()})
		return 2
	}
	defer f.Close()
	dec := json.NewDecoder(io.LimitReader(f, 64<<20))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		emit(out, map[string]any{"error": "usage", "message": err.Error()})
		return 2
	}
	schema, _ := doc["schema"].(string)
	if !converge.SupportsSchema(schema) {
		emit(out, map[string]any{"error": "unsupported-schema", "schema": doc["schema"]})
		return 2
	}
	tests, _ := doc["tests"].([]any)
	for _, t := range tests {
		c, _ := t.(map[string]any)
		res, err := converge.RunVectorCase(doc, c)
		if err != nil {
			fmt.Fprintf(errOut, "case %v: %v\n", c["id"], err)
			emit(out, map[string]any{"id": c["id"], "error": "harness", "message": err.Error()})
			continue
		}
		emit(out, res)
	}
	return 0
}

func check(dir, host, portText, fp string, out io.Writer) int {
	port, err := strconv.Atoi(portText)
	if err != nil || portText == "" || portText[0] < '0' || portText[0] > '9' {
		emit(out, map[string]any{"error": "usage", "message": "PORT must be decimal"})
		return 2
	}
	client, err := converge.NewClient(dir)
	if err == nil {
		defer client.Close()
		var v converge.Verdict
		if v, err = client.Check(context.Background(), host, port, fp); err == nil {
			notaries := []any{}
			for _, r := range v.Results {
				var status any
				if r.Status != 0 {
					status = r.Status
				}
				var protocol any
				if r.Protocol != "" {
					protocol = r.Protocol
				}
				notaries = append(notaries, map[string]any{"name": r.Name, "outcome": r.Vote,
					"kind": r.Kind, "status": status, "protocol": protocol})
			}
			var relay any
			if v.Relay != "" {
				relay = v.Relay
			}
			emit(out, map[string]any{"verdict": v.Trusted, "cache": v.FromCache, "relay": relay,
				"notaries": notaries})
			if v.Trusted {
				return 0
			}
			return 1
		}
	}
	kind := converge.ErrorKind(err)
	if kind == "" {
		kind = "io"
	}
	emit(out, map[string]any{"error": kind, "message": err.Error()})
	return 2
}

// hookFlags are the hook command's options and how many values each takes.
var hookFlags = map[string]int{"--proxy": 1, "--ca-file": 1, "--path": 1, "--first": 1,
	"--follow-redirects": 0, "--unhooked-first": 0}

// maxRedirects bounds --follow-redirects (CLIENT-CLI.md: at most 5 hops).
const maxRedirects = 5

// hook fetches https://HOST:PORT/P with an http.Client on Client.Transport (the TLS hook),
// through --proxy when given (never the environment's proxies). --follow-redirects lets
// http.Client follow redirects itself (every hop goes through the same hooked transport);
// --first fetches a URL first with the same hooked transport, its TLS session cache on;
// --unhooked-first fetches the URL first with the application's own base transport (CA
// validation only, the pool that code without the hook would use), its connection kept alive.
func hook(dir string, rest []string, out io.Writer) (int, bool) {
	opts := map[string]string{}
	for len(rest) > 0 {
		n, ok := hookFlags[rest[0]]
		if !ok || len(rest) <= n {
			break
		}
		if n == 1 {
			opts[rest[0]] = rest[1]
		} else {
			opts[rest[0]] = ""
		}
		rest = rest[1+n:]
	}
	path, ok := opts["--path"]
	if !ok {
		path = "/"
	}
	if len(rest) != 2 || !strings.HasPrefix(path, "/") {
		return 2, false
	}
	port, err := strconv.Atoi(rest[1])
	if err != nil || port < 1 || port > 65535 || rest[1][0] < '0' || rest[1][0] > '9' {
		return 2, false
	}
	var first *url.URL
	if f, ok := opts["--first"]; ok {
		u, err := url.Parse(f)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			emit(out, map[string]any{"error": "usage", "message": "--first must be an absolute https:// URL"})
			return 2, true
		}
		first = u
	}
	client, err := converge.NewClient(dir)
	if err != nil {
		emit(out, map[string]any{"error": converge.ErrorKind(err), "message": err.Error()})
		return 2, true
	}
	defer client.Close()
	// The TLS session cache is opt-in in crypto/tls: on, so that resumed sessions reach the
	// hook (and the transport's per-origin clones share it, as an application's would).
	base := &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12,
		ClientSessionCache: tls.NewLRUClientSessionCache(64)}}
	if p, ok := opts["--proxy"]; ok {
		u, err := url.Parse(p)
		if err != nil || u.Host == "" {
			emit(out, map[string]any{"error": "usage", "message": "bad proxy URL " + p})
			return 2, true
		}
		base.Proxy = http.ProxyURL(u)
	}
	if f := opts["--ca-file"]; f != "" {
		pem, err := os.ReadFile(f)
		roots := x509.NewCertPool()
		if err != nil || !roots.AppendCertsFromPEM(pem) {
			emit(out, map[string]any{"error": "usage", "message": "cannot read CA file " + f})
			return 2, true
		}
		base.TLSClientConfig.RootCAs = roots
	}
	defer base.CloseIdleConnections()
	timeout := time.Duration((client.Config.TotalTimeout + 10) * float64(time.Second))
	hooked := client.Transport(base, converge.TLSOptions{})
	defer hooked.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	noRedirects := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	target := "https://" + net.JoinHostPort(rest[0], rest[1]) + path
	if _, ok := opts["--unhooked-first"]; ok {
		plain := &http.Client{Transport: base, Timeout: timeout, CheckRedirect: noRedirects}
		if err := fetchAndDrain(plain, target); err != nil {
			return hookFailure(out, "first request: ", err)
		}
	}
	if first != nil {
		hc := &http.Client{Transport: hooked, Timeout: timeout, CheckRedirect: noRedirects}
		if err := fetchAndDrain(hc, first.String()); err != nil {
			return hookFailure(out, "first request: ", err)
		}
	}
	hc := &http.Client{Transport: hooked, Timeout: timeout, CheckRedirect: noRedirects}
	if _, ok := opts["--follow-redirects"]; ok {
		hc.CheckRedirect = func(_ *http.Request, via []*http.Request) error {
			if len(via) > maxRedirects {
				return fmt.Errorf("stopped after %d redirects", maxRedirects)
			}
			return nil
		}
	}
	resp, err := hc.Get(target)
	if err != nil {
		return hookFailure(out, "", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		return hookFailure(out, "", err)
	}
	emit(out, map[string]any{"connected": true, "status": resp.StatusCode, "body": string(body)})
	return 0, true
}

// fetchAndDrain GETs u and reads the body to its end (bounded), so that the connection goes
// back to its pool, alive, for whatever comes next.
func fetchAndDrain(hc *http.Client, u string) error {
	resp, err := hc.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return err
}

// hookFailure prints the failure line of a request that got no response: "untrusted" when
// the hook refused the certificate, "io" otherwise; a configuration error exits 2.
func hookFailure(out io.Writer, step string, err error) (int, bool) {
	var nt *converge.NotTrustedError
	kind := "io"
	if errors.As(err, &nt) {
		kind = "untrusted"
	} else if k := converge.ErrorKind(err); k != "" && k != "io" {
		emit(out, map[string]any{"error": k, "message": err.Error()})
		return 2, true
	}
	emit(out, map[string]any{"connected": false, "error": kind, "message": step + err.Error()})
	return 1, true
}
