package converge

import (
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// The shared test vectors (client-libs/vectors/*.json) through this library: RunVectorCase
// computes this implementation's output for one case, in the fields CLIENT-CLI.md names.
// The conformance CLI prints these outputs; the tests compare them with the expectations.

// VectorSchemas lists the vector schemas this implementation understands.
var VectorSchemas = []string{
	"converge-vectors/fingerprints/1",
	"converge-vectors/requests/1",
	"converge-vectors/legacy-signatures/1",
	"converge-vectors/notary-responses/1",
	"converge-vectors/bundles/1",
	"converge-vectors/consensus/1",
	"converge-vectors/cache/1",
	"converge-vectors/extended-answers/1",
	"converge-vectors/config/1",
	"converge-vectors/transparency/1",
}

// SupportsSchema reports whether schema is one of VectorSchemas.
func SupportsSchema(schema string) bool {
	for _, s := range VectorSchemas {
		if s == schema {
			return true
		}
	}
	return false
}

func vBytes(c map[string]any, name string) ([]byte, error) {
	if h, ok := c[name+"_hex"].(string); ok {
		return hex.DecodeString(h)
	}
	s, ok := c[name].(string)
	if !ok {
		return nil, fmt.Errorf("case has no %s", name)
	}
	return []byte(s), nil
}

func vString(c map[string]any, name string) string {
	s, _ := c[name].(string)
	return s
}

func vInt(c map[string]any, name string) (int64, bool) {
	switch n := c[name].(type) {
	case json.Number:
		i, err := strconv.ParseInt(n.String(), 10, 64)
		return i, err == nil
	case float64:
		return int64(n), float64(int64(n)) == n
	}
	return 0, false
}

func vFloat(c map[string]any, name string) (float64, bool) {
	switch n := c[name].(type) {
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case float64:
		return n, true
	}
	return 0, false
}

func vectorKey(doc map[string]any, name string) (any, error) {
	certs, _ := doc["certificates"].(map[string]any)
	p, _ := certs[name].(string)
	block, _ := pem.Decode([]byte(p))
	if block == nil {
		return nil, fmt.Errorf("vector certificate %q missing", name)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	return cert.PublicKey, nil
}

// RunVectorCase returns this implementation's output for one case of a vector file (doc is
// the whole file decoded with json.Decoder.UseNumber). An error means the case itself is
// unusable (a harness problem), never a rule violation, which is reported in the output.
func RunVectorCase(doc, c map[string]any) (map[string]any, error) {
	schema, _ := doc["schema"].(string)
	out := map[string]any{"id": c["id"]}
	invalid := func(err error) (map[string]any, error) {
		if k := ErrorKind(err); k != "" {
			out["result"], out["error"] = "invalid", k
			return out, nil
		}
		return nil, err
	}
	switch schema {
	case "converge-vectors/fingerprints/1":
		fp, err := ParseFingerprint(vString(c, "input"))
		if err != nil {
			return invalid(err)
		}
		out["result"], out["algorithm"], out["canonical"] = "valid", fp.Algorithm, fp.ColonHex()
	case "converge-vectors/requests/1":
		fp, err := ParseFingerprint(vString(c, "fingerprint"))
		if err != nil {
			return invalid(err)
		}
		port, ok := vInt(c, "port")
		if !ok || port != int64(int(port)) {
			return invalid(badInput(KindTarget, "invalid target port"))
		}
		req, err := RequestBytes(vString(c, "host"), int(port), fp, vString(c, "ip"))
		if err != nil {
			return invalid(err)
		}
		out["result"], out["request"] = "valid", string(req)
	case "converge-vectors/legacy-signatures/1":
		body, err := vBytes(c, "body")
		if err != nil {
			return nil, err
		}
		key, err := vectorKey(doc, vString(c, "certificate"))
		if err != nil {
			return nil, err
		}
		signed, err := VerifySignedList(body, key, MaxResponseBytes)
		if err != nil {
			return invalid(err)
		}
		out["result"], out["signed_bytes"] = "valid", string(signed.SignedBytes)
	case "converge-vectors/notary-responses/1":
		var wanted []Fingerprint
		list, _ := c["fingerprints"].([]any)
		for _, x := range list {
			s, _ := x.(string)
			fp, err := ParseFingerprint(s)
			if err != nil {
				return invalid(err)
			}
			wanted = append(wanted, fp)
		}
		raw, err := vBytes(c, "raw")
		if err != nil {
			return nil, err
		}
		key, err := vectorKey(doc, vString(c, "certificate"))
		if err != nil {
			return nil, err
		}
		o, _ := OutcomeFromHTTP(raw, wanted, key, MaxResponseBytes)
		out["result"], out["kind"] = string(o.Vote), o.Kind
	case "converge-vectors/bundles/1":
		data, err := vBytes(c, "bundle")
		if err != nil {
			return nil, err
		}
		b, err := ParseBundle(data)
		if err != nil {
			return invalid(err)
		}
		hosts := []any{}
		for _, h := range b.Hosts {
			hosts = append(hosts, map[string]any{"host": h.Host, "ssl_port": h.SSLPort,
				"http_port": h.HTTPPort, "pin": h.Pin.ColonHex()})
		}
		out["result"], out["name"], out["version"], out["hosts"] = "valid", b.Name, b.Version, hosts
	case "converge-vectors/consensus/1":
		policy, err := ParsePolicy(vString(c, "policy"))
		if err != nil {
			return invalid(err)
		}
		var votes []Vote
		list, _ := c["votes"].([]any)
		for _, x := range list {
			s, _ := x.(string)
			votes = append(votes, Vote(s))
		}
		standAside, _ := c["stand_aside"].(bool)
		pending, _ := vInt(c, "pending")
		if pending > 0 {
			v, ok, err := Settled(policy, votes, int(pending), standAside)
			if err != nil {
				return nil, err
			}
			out["result"] = map[bool]string{true: "trusted", false: "untrusted"}[v]
			if !ok {
				out["result"] = "unsettled"
			}
		} else {
			v, err := Decide(policy, votes, standAside)
			if err != nil {
				return nil, err
			}
			out["result"] = map[bool]string{true: "trusted", false: "untrusted"}[v]
		}
	case "converge-vectors/cache/1":
		var ts *int64
		if n, ok := vInt(c, "timestamp"); ok {
			ts = &n
		}
		now, _ := vFloat(c, "now")
		var lifetime *float64
		if f, ok := vFloat(c, "lifetime"); ok {
			lifetime = &f
		}
		out["result"] = CacheDecision(ts, now, lifetime)
	case "converge-vectors/extended-answers/1":
		return extendedCase(doc, c, out)
	case "converge-vectors/transparency/1":
		return transparencyCase(doc, c, out)
	case "converge-vectors/config/1":
		names, err := configCase(c)
		if err != nil {
			return invalid(err)
		}
		out["result"], out["enabled"] = "valid", names
	default:
		return nil, fmt.Errorf("unknown vector schema %q", schema)
	}
	return out, nil
}

// configCase creates the case's file tree in a fresh directory, loads it as the
// configuration directory and returns the enabled notaries' names, sorted.
func configCase(c map[string]any) ([]any, error) {
	root, err := os.MkdirTemp("", "converge-vector-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	files, _ := c["files"].(map[string]any)
	for rel, text := range files {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		s, _ := text.(string)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			return nil, err
		}
	}
	links, _ := c["links"].(map[string]any)
	for rel, target := range links {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		t, _ := target.(string)
		if err := os.Symlink(t, p); err != nil {
			return nil, err
		}
	}
	cfg, err := LoadConfig(root)
	if err != nil {
		return nil, err
	}
	bundles, err := cfg.Notaries()
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(bundles))
	for _, b := range bundles {
		names = append(names, b.Name)
	}
	sort.Strings(names)
	out := make([]any, len(names))
	for i, n := range names {
		out[i] = n
	}
	return out, nil
}

func extendedCase(doc, c, out map[string]any) (map[string]any, error) {
	switch vString(c, "type") {
	case "bundle":
		data, err := vBytes(c, "bundle")
		if err != nil {
			return nil, err
		}
		b, err := ParseBundle(data)
		if err != nil {
			out["result"], out["kind"] = "invalid", ErrorKind(err)
			return out, nil
		}
		out["result"], out["extended"] = "valid", b.OffersExtended()
		return out, nil
	case "answer":
	default:
		return nil, fmt.Errorf("unknown case type %q", vString(c, "type"))
	}
	exp, _ := c["expect"].(map[string]any)
	all, _ := doc["signing_keys"].(map[string]any)
	names, _ := c["bundle_keys"].([]any)
	var entries []any
	for _, n := range names {
		name, _ := n.(string)
		entries = append(entries, all[name])
	}
	text, err := json.Marshal(entries)
	if err != nil {
		return nil, err
	}
	parsed, err := decodeJSON(text)
	if err != nil {
		return nil, err
	}
	keys, err := parseSigningKeys(parsed)
	if err != nil {
		out["result"], out["error"] = "invalid", ErrorKind(err)
		return out, nil
	}
	now, _ := vInt(exp, "now")
	e := Expect{Host: vString(exp, "host"), Nonce: vString(exp, "nonce"), Now: &now, MaxSkew: DefaultMaxSkew}
	if p, ok := vInt(exp, "port"); ok {
		e.Port = int(p)
	}
	if _, stated := exp["ip"]; stated {
		e.BindIP, e.IP = true, vString(exp, "ip")
	}
	if ms, ok := vInt(exp, "max_skew"); ok {
		e.MaxSkew = ms
	}
	if fpText, ok := exp["fingerprint"].(string); ok {
		fp, err := ParseFingerprint(fpText)
		if err != nil {
			out["result"], out["error"] = "invalid", ErrorKind(err)
			return out, nil
		}
		e.Fingerprint = &fp
	}
	answer, err := vBytes(c, "answer")
	if err != nil {
		return nil, err
	}
	v, err := VerifyAnswer(answer, TrustedKeys(keys, now), e)
	if err != nil {
		out["result"], out["kind"] = "rejected", RejectReason(err)
		return out, nil
	}
	out["result"], out["verdict"] = "valid", v.Verdict
	return out, nil
}
