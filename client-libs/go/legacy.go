package converge

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// The legacy (v1) protocol, client side (pure): request bytes, response framing, the signed
// bytes S, RSA/SHA-1 verification and the reduction of an answer to a vote.

// Bounds on one response.
const (
	MaxResponseBytes  = 256 * 1024
	maxHeaderBytes    = 16 * 1024
	maxHistoryEntries = 1000
)

// CheckTarget refuses a host or port that cannot be put into /target/<host>+<port>.
func CheckTarget(host string, port int) error {
	if !hostRE.MatchString(host) || strings.HasPrefix(host, ".") || strings.HasPrefix(host, "-") {
		return badInput(KindTarget, "invalid target host %q", host)
	}
	if port < 1 || port > 65535 {
		return badInput(KindTarget, "invalid target port %d", port)
	}
	return nil
}

// Location is the cache and record key "host:port" (host lower-cased).
func Location(host string, port int) string {
	return strings.ToLower(host) + ":" + strconv.Itoa(port)
}

// CheckIP returns an IP address literal in its compressed form, or a "target" error.
func CheckIP(ip string) (string, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return "", badInput(KindTarget, "invalid target address %q", ip)
	}
	return a.String(), nil
}

// RequestBytes is the exact request the 2011 add-on sends. A non-empty ip asks the notary
// to connect to that address (/target/<host>+<port>/<ip>, a later fork's extension).
func RequestBytes(host string, port int, fp Fingerprint, ip string) ([]byte, error) {
	if err := CheckTarget(host, port); err != nil {
		return nil, err
	}
	suffix := ""
	if ip != "" {
		c, err := CheckIP(ip)
		if err != nil {
			return nil, err
		}
		suffix = "/" + c
	}
	body := "fingerprint=" + fp.ColonHex()
	head := fmt.Sprintf("POST /target/%s+%d%s HTTP/1.0\r\n"+
		"Content-Type: application/x-www-form-urlencoded\r\n"+
		"Connection: close\r\n"+
		"Content-Length: %d\r\n\r\n", strings.ToLower(host), port, suffix, len(body))
	return []byte(head + body), nil
}

// HTTPResponse is a split HTTP/1.x response; header names are lower-cased.
type HTTPResponse struct {
	Status  int
	Headers map[string]string
	Body    []byte
}

var statusLineRE = regexp.MustCompile(`^HTTP/1\.[01] (\d{3})(?: .*)?$`)

func responseErr(format string, args ...any) error {
	return badInput(KindResponse, format, args...)
}

func latin1(b []byte) string {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return string(r)
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// ParseHTTPResponse splits a complete response read until EOF. Chunked coding is refused; a
// Content-Length longer than the body is a truncated response; extra bytes are ignored.
func ParseHTTPResponse(raw []byte, maxBytes int) (*HTTPResponse, error) {
	if len(raw) > maxBytes {
		return nil, responseErr("response larger than %d bytes", maxBytes)
	}
	sep, sepLen := bytes.Index(raw, []byte("\r\n\r\n")), 4
	if sep < 0 {
		sep, sepLen = bytes.Index(raw, []byte("\n\n")), 2
	}
	if sep < 0 {
		return nil, responseErr("response has no end of headers")
	}
	if sep > maxHeaderBytes {
		return nil, responseErr("response headers too large")
	}
	head := strings.ReplaceAll(latin1(raw[:sep]), "\r\n", "\n")
	lines := strings.Split(head, "\n")
	m := statusLineRE.FindStringSubmatch(lines[0])
	if m == nil {
		return nil, responseErr("bad status line %.80q", lines[0])
	}
	status, _ := strconv.Atoi(m[1])
	headers := map[string]string{}
	for _, line := range lines[1:] {
		name, value, ok := strings.Cut(line, ":")
		if !ok || name == "" || name != pyStrip(name) {
			return nil, responseErr("bad header line %.80q", line)
		}
		key := strings.ToLower(name)
		value = pyStrip(value)
		if old, dup := headers[key]; dup {
			headers[key] = old + ", " + value
		} else {
			headers[key] = value
		}
	}
	body := raw[sep+sepLen:]
	if strings.Contains(strings.ToLower(headers["transfer-encoding"]), "chunked") {
		return nil, responseErr("chunked transfer coding is not allowed on notary responses")
	}
	if cl, ok := headers["content-length"]; ok {
		if !allDigits(cl) || len(cl) > 12 {
			return nil, responseErr("bad Content-Length %.20q", cl)
		}
		n, err := strconv.Atoi(cl)
		if err != nil || n > len(body) {
			return nil, responseErr("truncated response body")
		}
		body = body[:n]
	}
	return &HTTPResponse{status, headers, body}, nil
}

// pyStrip strips what Python's str.strip() strips from latin-1 text.
func pyStrip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		switch r {
		case ' ', '\t', '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x1f, 0x85, 0xa0:
			return true
		}
		return false
	})
}

// HistoryEntry is one fingerprint of a notary's history for a target.
type HistoryEntry struct {
	Fingerprint Fingerprint
	Start       int64
	Finish      int64
}

// SignedList is a verified 200/409 body.
type SignedList struct {
	Entries []HistoryEntry
	// SignedBytes is S: the body up to the last `, "signature": "`, then "}". The signature
	// covers exactly these bytes, and Entries come from them alone.
	SignedBytes []byte
	Signature   []byte
}

// Lists reports whether fp is in the signed history.
func (s *SignedList) Lists(fp Fingerprint) bool {
	for _, e := range s.Entries {
		if e.Fingerprint.Equal(fp) {
			return true
		}
	}
	return false
}

func jsonTimestamp(v any, what string) (int64, error) {
	if s, ok := jString(v); ok && allDigits(s) && len(s) <= 12 {
		n, _ := strconv.ParseInt(s, 10, 64)
		return n, nil
	}
	if n, ok := jInt(v); ok && n >= 0 && n < 1_000_000_000_000 {
		return n, nil
	}
	return 0, responseErr("%s is not a decimal unix time", what)
}

var (
	sigMarker = []byte(`, "signature": "`)
	sigTailRE = regexp.MustCompile(`^[A-Za-z0-9+/]+={0,2}"\}$`)
)

// splitSigned frames a 200/409 body: S and the signature text, or a "response" error.
func splitSigned(body []byte, maxBytes int) (signed []byte, sigText string, err error) {
	if len(body) > maxBytes {
		return nil, "", responseErr("body larger than %d bytes", maxBytes)
	}
	i := bytes.LastIndex(body, sigMarker)
	if i < 0 {
		return nil, "", responseErr("body has no signature member")
	}
	tail := body[i+len(sigMarker):]
	if !sigTailRE.Match(tail) {
		return nil, "", responseErr("the signature must be the last member and the body must end with it")
	}
	return append(append([]byte{}, body[:i]...), '}'), string(tail[:len(tail)-2]), nil
}

// parseSignedBytes reads the history out of verified bytes S: the bounds scan, the stock
// parser, then the shape.
func parseSignedBytes(signed []byte) ([]HistoryEntry, error) {
	if err := boundsScan(signed); err != nil {
		return nil, responseErr("signed bytes: %v", err)
	}
	obj, err := decodeObject(signed)
	if err != nil {
		return nil, responseErr("signed bytes are not a JSON object: %v", err)
	}
	fl, ok := jArray(obj["fingerprintList"])
	if !ok {
		return nil, responseErr("fingerprintList missing or not a list")
	}
	if len(fl) > maxHistoryEntries {
		return nil, responseErr("more than %d history entries", maxHistoryEntries)
	}
	entries := []HistoryEntry{}
	for _, x := range fl {
		item, ok := jObject(x)
		if !ok {
			return nil, responseErr("history entry is not an object")
		}
		ts, ok := jObject(item["timestamp"])
		if !ok {
			return nil, responseErr("history entry has no timestamp object")
		}
		fpText, ok := jString(item["fingerprint"])
		if !ok {
			return nil, responseErr("history entry has no fingerprint")
		}
		fp, err := ParseFingerprint(fpText)
		if err != nil {
			return nil, responseErr("history entry fingerprint: %v", err.(*Error).Message)
		}
		start, err := jsonTimestamp(ts["start"], "start")
		if err != nil {
			return nil, err
		}
		finish, err := jsonTimestamp(ts["finish"], "finish")
		if err != nil {
			return nil, err
		}
		entries = append(entries, HistoryEntry{fp, start, finish})
	}
	return entries, nil
}

// VerifySignedList checks a 200/409 body in the documented order (docs/wire-format.md,
// "Verifying a legacy answer"): framing ("response"), the RSASSA-PKCS1-v1_5 SHA-1 signature
// over S ("signature"), then the bounds scan, the parse and the shape of S ("response").
// Errors have kind "response" or "signature".
func VerifySignedList(body []byte, publicKey crypto.PublicKey, maxBytes int) (*SignedList, error) {
	signed, sigText, err := splitSigned(body, maxBytes)
	if err != nil {
		return nil, err
	}
	key, ok := publicKey.(*rsa.PublicKey)
	if !ok {
		return nil, badInput(KindSignature, "the notary certificate does not hold an RSA key")
	}
	sig, err := base64.StdEncoding.DecodeString(sigText)
	h := sha1.Sum(signed)
	if err != nil || rsa.VerifyPKCS1v15(key, crypto.SHA1, h[:], sig) != nil {
		return nil, badInput(KindSignature, "signature does not verify against the notary's certificate")
	}
	entries, err := parseSignedBytes(signed)
	if err != nil {
		return nil, err
	}
	return &SignedList{Entries: entries, SignedBytes: signed, Signature: sig}, nil
}

// Outcome is one notary's answer reduced to a vote; Kind says why (listed, status-only,
// mismatch, not-listed, response, signature, inconclusive, status, or an IO kind).
type Outcome struct {
	Vote    Vote
	Kind    string
	Status  int // 0 = none
	Detail  string
	History []HistoryEntry
	Answer  []byte // a verified extended answer
}

func failureOf(err error, status int) Outcome {
	e := err.(*Error)
	return Outcome{Vote: VoteFailure, Kind: e.Kind, Status: status, Detail: e.Message}
}

// Evaluate reduces one response (status and body) to a vote. wanted holds the forms of the
// asked certificate's fingerprint (the asked one first).
func Evaluate(status int, body []byte, wanted []Fingerprint, publicKey crypto.PublicKey, maxBytes int) Outcome {
	switch status {
	case 200, 409:
		signed, err := VerifySignedList(body, publicKey, maxBytes)
		if err != nil {
			return failureOf(err, status)
		}
		if status == 409 {
			return Outcome{VoteFailure, "mismatch", status, "notary sees another certificate", signed.Entries, nil}
		}
		for _, fp := range wanted {
			if signed.Lists(fp) {
				return Outcome{VoteSuccess, "listed", status, "", signed.Entries, nil}
			}
		}
		listedAlg := map[string]bool{}
		for _, e := range signed.Entries {
			listedAlg[e.Fingerprint.Algorithm] = true
		}
		anyAlg := false
		for _, fp := range wanted {
			anyAlg = anyAlg || listedAlg[fp.Algorithm]
		}
		if !anyAlg && len(signed.Entries) > 0 {
			// A v1 list carries SHA-1 only; asked by SHA-256 alone the pinned 200 decides.
			return Outcome{VoteSuccess, "status-only", status, "list holds no fingerprint of the asked kind", signed.Entries, nil}
		}
		return Outcome{VoteFailure, "not-listed", status, "200 without the fingerprint in the signed list", signed.Entries, nil}
	case 303:
		return Outcome{Vote: VoteUnreachable, Kind: "inconclusive", Status: status, Detail: "notary could not decide"}
	}
	return Outcome{Vote: VoteUnreachable, Kind: "status", Status: status, Detail: fmt.Sprintf("HTTP status %d", status)}
}

// OutcomeFromHTTP reduces a whole response (read until EOF) to a vote; framing errors are
// failures of kind "response" (the pinned notary itself sent them).
func OutcomeFromHTTP(raw []byte, wanted []Fingerprint, publicKey crypto.PublicKey, maxBytes int) (Outcome, *HTTPResponse) {
	resp, err := ParseHTTPResponse(raw, maxBytes)
	if err != nil {
		return failureOf(err, 0), nil
	}
	return Evaluate(resp.Status, resp.Body, wanted, publicKey, MaxResponseBytes), resp
}
