// Command converge-conformance is the conformance CLI of the Go client
// (client-libs/conformance/CLIENT-CLI.md):
//
//	converge-conformance info
//	converge-conformance check --config-dir DIR HOST PORT FINGERPRINT
//	converge-conformance vector FILE
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	converge "converge.example/go"
)

const usage = `usage: converge-conformance check --config-dir DIR HOST PORT FINGERPRINT
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
		emit(out, map[string]any{"language": "go", "implementation": "converge.example/go",
			"version": converge.Version, "schemas": converge.VectorSchemas})
		return 0
	case len(args) == 2 && args[0] == "vector":
		return vector(args[1], out, errOut)
	case len(args) == 6 && args[0] == "check" && args[1] == "--config-dir":
		return check(args[2], args[3], args[4], args[5], out)
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
