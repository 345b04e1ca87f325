package converge

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

// The extended format converge-answer/1 (docs/wire-format.md), client side (pure):
// verification of a signed answer in the documented order, each failure named.

// ExtendedFormat is the protocol name a bundle lists in "protocols".
const ExtendedFormat = "converge-answer/1"

const (
	maxAnswerBytes  = 64 * 1024
	DefaultMaxSkew  = 300
	maxExtNonceText = 128
)

// Names of the checks an extended answer can fail, in verification order.
const (
	RejectMalformed     = "malformed"
	RejectUnknownKey    = "unknown-key"
	RejectBadSignature  = "bad-signature"
	RejectWrongTarget   = "wrong-target"
	RejectNonceMismatch = "nonce-mismatch"
	RejectStale         = "stale"
)

var extVerdicts = map[string]bool{"match": true, "mismatch": true, "unreachable": true, "refused": true}

// AnswerRejected is a failed verification; Reason is one of the Reject constants.
type AnswerRejected struct {
	Reason  string
	Message string
}

func (e *AnswerRejected) Error() string {
	return fmt.Sprintf("converge: answer rejected (%s): %s", e.Reason, e.Message)
}

func reject(reason, format string, args ...any) error {
	return &AnswerRejected{reason, fmt.Sprintf(format, args...)}
}

// RejectReason returns the Reason of an *AnswerRejected, else "".
func RejectReason(err error) string {
	var r *AnswerRejected
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

// unb64url decodes unpadded base64url (unused trailing bits are not checked, as in the
// Python client).
func unb64url(s string) ([]byte, error) {
	if len(s)%4 == 1 {
		return nil, errors.New("not base64url without padding")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return nil, errors.New("not base64url without padding")
		}
	}
	return base64.RawURLEncoding.DecodeString(s)
}

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// keyIDOf is the first 8 bytes of SHA-256 of a raw public key, lower-case hex.
func keyIDOf(raw []byte) string {
	d := sha256.Sum256(raw)
	return hex.EncodeToString(d[:8])
}

// TrustedAt: a current key always, a retired one while now <= valid_until.
func (k SigningKey) TrustedAt(now int64) bool {
	return k.Status == "current" || (k.Status == "retired" && now <= k.ValidUntil)
}

// TrustedKeys returns the bundle's signing keys trusted at now, by key id.
func TrustedKeys(keys []SigningKey, now int64) map[string]ed25519.PublicKey {
	out := map[string]ed25519.PublicKey{}
	for _, k := range keys {
		if k.TrustedAt(now) {
			out[k.KeyID] = ed25519.PublicKey(k.PublicKey)
		}
	}
	return out
}

// ExpectedHost is the host as a notary names it in target.host: an IP literal in its
// compressed form, a DNS name in lower case without a trailing dot.
func ExpectedHost(host string) string {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return ip.String()
	}
	name := strings.ToLower(host)
	return strings.TrimSuffix(name, ".")
}

// ExtendedAnswer is a verified answer.
type ExtendedAnswer struct {
	Verdict      string // match, mismatch, unreachable, refused
	Detail       string
	KeyID        string
	AnsweredAt   int64
	Cache        string
	Observations []ExtObservation
	// Member is the transparency member's value as received (nil: absent); Log what it
	// proves, when Expect.Log named the bundle's log and the verdict is match.
	Member []byte
	Log    *LogProof
}

// ExtObservation is one entry of the signed history.
type ExtObservation struct {
	SHA256, SHA1        string
	FirstSeen, LastSeen int64
}

// Expect is what a verifier binds an answer to. Empty Host skips the target check, a nil
// Fingerprint the fingerprint check, empty Nonce the nonce check, nil Now the freshness
// check (an offline verifier may not know them).
type Expect struct {
	Host        string
	Port        int
	Fingerprint *Fingerprint
	Nonce       string
	Now         *int64
	MaxSkew     int64
	// BindIP: target.ip must be IP ("" = the client named no address, so an answer about
	// a probe of an address someone else chose is wrong-target).
	BindIP bool
	IP     string
	// Log: the bundle names a transparency log, so a match must carry a valid proof of
	// inclusion (docs/transparency.md, "Clients"); nil changes nothing.
	Log *LogPolicy
}

// answerPrefixRE is the fixed start of every answer: the signature member, then the
// statement's name. K and V are runs of printable ASCII without '"' or '\'.
var answerPrefixRE = regexp.MustCompile(`^\{"signature":\{"alg":"ed25519","key_id":"([\x20\x21\x23-\x5b\x5d-\x7e]+)","value":"([\x20\x21\x23-\x5b\x5d-\x7e]+)"\},"statement":`)

// VerifyAnswer checks an extended answer body in the documented order (docs/wire-format.md,
// "Verifying"): malformed (framing), unknown-key, bad-signature (Ed25519 over the statement
// bytes T as received), malformed (bounds scan, parse and shape of T), wrong-target,
// nonce-mismatch, stale; then, with exp.Log and a match, the transparency member (log-missing,
// log-proof, log-checkpoint, log-witness, log-entry). The statement bytes T end at the first
// `,"transparency":` after the prefix. Every failure is an *AnswerRejected.
func VerifyAnswer(raw []byte, keys map[string]ed25519.PublicKey, exp Expect) (*ExtendedAnswer, error) {
	if len(raw) > maxAnswerBytes {
		return nil, reject(RejectMalformed, "answer too large")
	}
	m := answerPrefixRE.FindSubmatchIndex(raw)
	if m == nil || len(raw) < m[1]+1 || raw[len(raw)-1] != '}' {
		return nil, reject(RejectMalformed, "answer does not have the fixed signature prefix and a final brace")
	}
	kid, value := string(raw[m[2]:m[3]]), string(raw[m[4]:m[5]])
	stmtBytes, member := splitMember(raw[m[1] : len(raw)-1])
	pub, ok := keys[kid]
	if !ok {
		return nil, reject(RejectUnknownKey, "signing key %.80q is not trusted", kid)
	}
	signature, err := unb64url(value)
	if err != nil || len(signature) != ed25519.SignatureSize || len(pub) != ed25519.PublicKeySize ||
		!ed25519.Verify(pub, stmtBytes, signature) {
		return nil, reject(RejectBadSignature, "signature does not verify")
	}
	if err := boundsScan(stmtBytes); err != nil {
		return nil, reject(RejectMalformed, "statement: %v", err)
	}
	stmt, err := decodeObject(stmtBytes)
	if err != nil {
		return nil, reject(RejectMalformed, "statement is not a JSON object: %v", err)
	}
	typ, _ := jString(stmt["type"])
	skid, _ := jString(stmt["key_id"])
	verdict, _ := jString(stmt["verdict"])
	target, isObj := jObject(stmt["target"])
	at, isInt := jInt(stmt["answered_at"])
	switch {
	case typ != ExtendedFormat:
		return nil, reject(RejectMalformed, "statement type is not %s", ExtendedFormat)
	case skid != kid:
		return nil, reject(RejectMalformed, "key ids of statement and signature differ")
	case !extVerdicts[verdict] || !isObj:
		return nil, reject(RejectMalformed, "statement lacks a verdict or target")
	case !isInt:
		return nil, reject(RejectMalformed, "answered_at must be an integer")
	}
	if exp.Host != "" {
		th, okh := jString(target["host"])
		tp, okp := jInt(target["port"])
		if !okh || !okp || th != ExpectedHost(exp.Host) || tp != int64(exp.Port) {
			return nil, reject(RejectWrongTarget, "answer is about another target, not %s:%d", exp.Host, exp.Port)
		}
	}
	if exp.BindIP {
		tip, named := target["ip"]
		if exp.IP == "" {
			if named && tip != nil {
				return nil, reject(RejectWrongTarget, "answer is about a probe of an address the client did not name")
			}
		} else if s, ok := jString(tip); !ok || s != ExpectedHost(exp.IP) {
			return nil, reject(RejectWrongTarget, "answer is about a probe of another address, not %s", exp.IP)
		}
	}
	request, _ := jObject(stmt["request"])
	if exp.Fingerprint != nil {
		alg, ok1 := jString(request["alg"])
		fp, ok2 := jString(request["fingerprint"])
		if !ok1 || !ok2 || alg != exp.Fingerprint.Algorithm || fp != exp.Fingerprint.ColonHex() {
			return nil, reject(RejectWrongTarget, "answer is about another certificate fingerprint")
		}
	}
	if exp.Nonce != "" {
		if n, ok := jString(request["nonce"]); !ok || n != exp.Nonce {
			return nil, reject(RejectNonceMismatch, "answer does not echo our nonce")
		}
	}
	if exp.Now != nil {
		d := *exp.Now - at
		if d < 0 {
			d = -d
		}
		if d > exp.MaxSkew {
			return nil, reject(RejectStale, "answer time is %d s from now (max skew %d s)", *exp.Now-at, exp.MaxSkew)
		}
	}
	out := &ExtendedAnswer{Verdict: verdict, KeyID: kid, AnsweredAt: at, Member: member}
	if exp.Log != nil && verdict == "match" {
		if out.Log, err = checkLog(exp.Log, member, target, request, exp.Fingerprint); err != nil {
			return nil, err
		}
	}
	out.Detail, _ = jString(stmt["detail"])
	out.Cache, _ = jString(stmt["cache"])
	obs, _ := jArray(stmt["observations"])
	for _, x := range obs {
		o, _ := jObject(x)
		var e ExtObservation
		e.SHA256, _ = jString(o["sha256"])
		e.SHA1, _ = jString(o["sha1"])
		e.FirstSeen, _ = jInt(o["first_seen"])
		e.LastSeen, _ = jInt(o["last_seen"])
		out.Observations = append(out.Observations, e)
	}
	return out, nil
}

// ---------------------------------------------------------------- requests and outcomes

// Extended-format modes of the "extended" configuration key.
const (
	ExtendedOff      = "off"      // legacy only
	ExtendedPrefer   = "prefer"   // extended with notaries whose bundle offers it
	ExtendedFallback = "fallback" // as prefer, legacy when the host does not offer it
	ExtendedRequire  = "require"  // ask only notaries that offer it
)

// AnswerMediaType is the Content-Type of a signed answer; AnswerPath its request path.
const (
	AnswerMediaType = "application/vnd.converge.answer+json"
	AnswerPath      = "/v2/answer"
)

// verdictStatus is the status a notary sends with each signed verdict.
var verdictStatus = map[string]int{"match": 200, "mismatch": 409, "unreachable": 503, "refused": 403}

// notOffered: statuses meaning "this notary does not speak the extended format here".
var notOffered = map[int]bool{400: true, 404: true, 405: true, 501: true}

// NewNonce returns unpadded base64url of 16 random bytes.
func NewNonce() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b64url(b)
}

// ExtendedRequestBytes is the whole HTTP/1.0 request of the extended format.
func ExtendedRequestBytes(host string, port int, fp Fingerprint, nonce, ip string) ([]byte, error) {
	return extendedRequest(host, port, fp, nonce, ip, false)
}

// extendedRequest: with proof, the request asks for a proof of inclusion in the log.
func extendedRequest(host string, port int, fp Fingerprint, nonce, ip string, proof bool) ([]byte, error) {
	if err := CheckTarget(host, port); err != nil {
		return nil, err
	}
	hostJSON, _ := json.Marshal(host)
	body := fmt.Sprintf(`{"host":%s,"port":%d,"fingerprint":"%s","alg":"%s"`, hostJSON, port, fp.ColonHex(), fp.Algorithm)
	if ip != "" {
		c, err := CheckIP(ip)
		if err != nil {
			return nil, err
		}
		body += `,"ip":"` + c + `"`
	}
	if nonce != "" {
		body += `,"nonce":"` + nonce + `"`
	}
	if proof {
		body += `,"transparency":true`
	}
	body += "}"
	head := fmt.Sprintf("POST %s HTTP/1.0\r\nContent-Type: application/json\r\nAccept: %s\r\n"+
		"Connection: close\r\nContent-Length: %d\r\n\r\n", AnswerPath, AnswerMediaType, len(body))
	return []byte(head + body), nil
}

// RequestFingerprint is the form to ask about: SHA-256 when known, else the first.
func RequestFingerprint(forms []Fingerprint) Fingerprint {
	for _, f := range forms {
		if f.Algorithm == "sha256" {
			return f
		}
	}
	return forms[0]
}

// extVotes maps a verified verdict to a vote and kind: "refused" stands aside like an
// unreachable notary (it says nothing about the certificate).
var extVotes = map[string][2]string{
	"match":       {string(VoteSuccess), "match"},
	"mismatch":    {string(VoteFailure), "mismatch"},
	"unreachable": {string(VoteUnreachable), "target-unreachable"},
	"refused":     {string(VoteUnreachable), "refused"},
}

// EvaluateExtended reduces one extended response to a vote: a verification failure is a
// failure of the kind it names; a status that does not fit the signed verdict is a
// "response" failure; a response without a signed answer is an unreachable "status".
func EvaluateExtended(resp *HTTPResponse, keys map[string]ed25519.PublicKey, exp Expect) Outcome {
	ctype := strings.ToLower(strings.TrimSpace(strings.SplitN(resp.Headers["content-type"], ";", 2)[0]))
	signed := false
	for _, st := range verdictStatus {
		signed = signed || st == resp.Status
	}
	if !signed || ctype != AnswerMediaType {
		return Outcome{Vote: VoteUnreachable, Kind: "status", Status: resp.Status, Detail: fmt.Sprintf("HTTP status %d", resp.Status)}
	}
	v, err := VerifyAnswer(resp.Body, keys, exp)
	if err != nil {
		return Outcome{Vote: VoteFailure, Kind: RejectReason(err), Status: resp.Status, Detail: err.Error()}
	}
	if verdictStatus[v.Verdict] != resp.Status {
		return Outcome{Vote: VoteFailure, Kind: KindResponse, Status: resp.Status,
			Detail: fmt.Sprintf("status %d with signed verdict %s", resp.Status, v.Verdict)}
	}
	vk := extVotes[v.Verdict]
	return Outcome{Vote: Vote(vk[0]), Kind: vk[1], Status: resp.Status, Detail: v.Detail, Answer: resp.Body}
}

// checkLog checks the member of a match against the statement's target and the fingerprint
// asked about (fp; nil: the statement's request, which must then be of its own alg).
func checkLog(p *LogPolicy, member []byte, target, request map[string]any, fp *Fingerprint) (*LogProof, error) {
	if fp == nil {
		alg, _ := jString(request["alg"])
		text, _ := jString(request["fingerprint"])
		f, err := ParseFingerprint(text)
		if err != nil || f.Algorithm != alg {
			return nil, reject(RejectLogEntry, "the statement names no fingerprint of its alg")
		}
		fp = &f
	}
	return p.CheckMember(member, target, *fp)
}
