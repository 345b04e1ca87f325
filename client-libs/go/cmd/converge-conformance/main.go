// Command converge-conformance is the conformance CLI of the Go client
// (client-libs/conformance/CLIENT-CLI.md):
//
//	converge-conformance info
//	converge-conformance check --config-dir DIR HOST PORT FINGERPRINT
//	converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] HOST PORT
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
	"time"

	converge "github.com/converge-notary/converge/client-libs/go"
)

const usage = `usage: converge-conformance check --config-dir DIR HOST PORT FINGERPRINT
       converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] HOST PORT
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

// hook fetches https://HOST:PORT/ with an http.Client on Client.Transport (the TLS hook),
// through --proxy when given (never the environment's proxies).
func hook(dir string, rest []string, out io.Writer) (int, bool) {
	opts := map[string]string{}
	for len(rest) >= 2 && (rest[0] == "--proxy" || rest[0] == "--ca-file") {
		opts[rest[0]] = rest[1]
		rest = rest[2:]
	}
	if len(rest) != 2 {
		return 2, false
	}
	port, err := strconv.Atoi(rest[1])
	if err != nil || port < 1 || port > 65535 {
		return 2, false
	}
	client, err := converge.NewClient(dir)
	if err != nil {
		emit(out, map[string]any{"error": converge.ErrorKind(err), "message": err.Error()})
		return 2, true
	}
	defer client.Close()
	base := &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	if p := opts["--proxy"]; p != "" {
		u, err := url.Parse(p)
		if err != nil {
			emit(out, map[string]any{"error": "usage", "message": err.Error()})
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
	timeout := time.Duration((client.Config.TotalTimeout + 10) * float64(time.Second))
	hc := &http.Client{Transport: client.Transport(base, converge.TLSOptions{}), Timeout: timeout}
	resp, err := hc.Get("https://" + net.JoinHostPort(rest[0], rest[1]) + "/")
	if err != nil {
		var nt *converge.NotTrustedError
		kind := "io"
		if errors.As(err, &nt) {
			kind = "untrusted"
		} else if k := converge.ErrorKind(err); k != "" && k != "io" {
			emit(out, map[string]any{"error": k, "message": err.Error()})
			return 2, true
		}
		emit(out, map[string]any{"connected": false, "error": kind, "message": err.Error()})
		return 1, true
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		emit(out, map[string]any{"connected": false, "error": "io", "message": err.Error()})
		return 1, true
	}
	emit(out, map[string]any{"connected": true, "status": resp.StatusCode, "body": string(body)})
	return 0, true
}
