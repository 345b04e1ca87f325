package converge

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
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
	RejectNonCanonical  = "non-canonical"
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

func unb64url(s string) ([]byte, error) {
	if strings.ContainsAny(s, "=+/") {
		return nil, errors.New("not base64url without padding")
	}
	return base64.RawURLEncoding.Strict().DecodeString(s)
}

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// keyIDOf is the first 8 bytes of SHA-256 of a raw public key, lower-case hex.
func keyIDOf(raw []byte) string {
	d := sha256.Sum256(raw)
	return hex.EncodeToString(d[:8])
}

// TrustedKeys returns the bundle's signing keys usable at now, by key id: current keys, and
// retired ones until their valid_until.
func (b *Bundle) TrustedKeys(now int64) map[string]ed25519.PublicKey {
	out := map[string]ed25519.PublicKey{}
	for _, k := range b.SigningKeys {
		if k.Status == "retired" && (k.ValidUntil == 0 || now > k.ValidUntil) {
			continue
		}
		if k.Status != "current" && k.Status != "retired" {
			continue
		}
		out[k.KeyID] = ed25519.PublicKey(k.PublicKey)
	}
	return out
}

// ExtendedAnswer is a verified answer.
type ExtendedAnswer struct {
	Verdict      string // match, mismatch, unreachable, refused
	Detail       string
	KeyID        string
	AnsweredAt   int64
	Cache        string
	Observations []ExtObservation
	statement    *jsonValue
}

// ExtObservation is one entry of the signed history.
type ExtObservation struct {
	SHA256, SHA1        string
	FirstSeen, LastSeen int64
}

// Expect is what a verifier binds an answer to. Empty Host skips the target check, empty
// Nonce the nonce check, Now 0 the freshness check (an offline verifier may not know them).
type Expect struct {
	Host    string
	Port    int
	Nonce   string
	Now     int64
	MaxSkew int64 // 0 = DefaultMaxSkew
}

// VerifyAnswer checks an extended answer body in the documented order:
// malformed / non-canonical, malformed (type, alg, key ids), unknown-key, bad-signature,
// wrong-target, nonce-mismatch, stale.
func VerifyAnswer(raw []byte, keys map[string]ed25519.PublicKey, exp Expect) (*ExtendedAnswer, error) {
	if len(raw) > maxAnswerBytes {
		return nil, reject(RejectMalformed, "answer too large")
	}
	doc, err := parseJSON(raw)
	if err != nil {
		return nil, reject(RejectMalformed, "answer is not JSON")
	}
	if doc.kind != jObject || len(doc.keys) != 2 || !doc.has("statement") || !doc.has("signature") {
		return nil, reject(RejectMalformed, "answer must have exactly statement and signature")
	}
	stmt, sig := doc.get("statement"), doc.get("signature")
	if stmt.kind != jObject || sig.kind != jObject {
		return nil, reject(RejectMalformed, "statement and signature must be objects")
	}
	canon, err := canonicalJSON(doc)
	if err != nil {
		return nil, reject(RejectMalformed, "answer holds values canonical JSON cannot encode")
	}
	if !bytes.Equal(canon, raw) {
		return nil, reject(RejectNonCanonical, "answer bytes are not canonical JSON")
	}
	typ, _ := stmt.get("type").asString()
	alg, _ := sig.get("alg").asString()
	if typ != ExtendedFormat || alg != "ed25519" {
		return nil, reject(RejectMalformed, "not a %s answer signed with ed25519", ExtendedFormat)
	}
	kid, ok := sig.get("key_id").asString()
	skid, ok2 := stmt.get("key_id").asString()
	if !ok || !ok2 || kid != skid {
		return nil, reject(RejectMalformed, "key ids of statement and signature differ")
	}
	pub, ok := keys[kid]
	if !ok {
		return nil, reject(RejectUnknownKey, "signing key %s is not trusted", kid)
	}
	value, _ := sig.get("value").asString()
	signature, err := unb64url(value)
	stmtBytes, _ := canonicalJSON(stmt)
	if err != nil || len(signature) != ed25519.SignatureSize || len(pub) != ed25519.PublicKeySize ||
		!ed25519.Verify(pub, stmtBytes, signature) {
		return nil, reject(RejectBadSignature, "signature does not verify")
	}
	verdict, _ := stmt.get("verdict").asString()
	target := stmt.get("target")
	if !extVerdicts[verdict] || target == nil || target.kind != jObject {
		return nil, reject(RejectMalformed, "statement lacks a verdict or target")
	}
	if exp.Host != "" {
		th, okh := target.get("host").asString()
		tp, okp := target.get("port").asInt()
		if !okh || !okp || th != exp.Host || tp != int64(exp.Port) {
			return nil, reject(RejectWrongTarget, "answer is about another target, not %s:%d", exp.Host, exp.Port)
		}
	}
	if exp.Nonce != "" {
		n, ok := stmt.get("request").get("nonce").asString()
		if !ok || n != exp.Nonce {
			return nil, reject(RejectNonceMismatch, "answer does not echo our nonce")
		}
	}
	at, ok := stmt.get("answered_at").asInt()
	if !ok {
		return nil, reject(RejectMalformed, "answered_at must be an integer")
	}
	if exp.Now != 0 {
		skew := exp.MaxSkew
		if skew == 0 {
			skew = DefaultMaxSkew
		}
		d := exp.Now - at
		if d < 0 {
			d = -d
		}
		if d > skew {
			return nil, reject(RejectStale, "answer time is %d s from now", exp.Now-at)
		}
	}
	out := &ExtendedAnswer{Verdict: verdict, KeyID: kid, AnsweredAt: at, statement: stmt}
	out.Detail, _ = stmt.get("detail").asString()
	out.Cache, _ = stmt.get("cache").asString()
	if obs := stmt.get("observations"); obs != nil && obs.kind == jArray {
		for _, o := range obs.arr {
			var e ExtObservation
			e.SHA256, _ = o.get("sha256").asString()
			e.SHA1, _ = o.get("sha1").asString()
			e.FirstSeen, _ = o.get("first_seen").asInt()
			e.LastSeen, _ = o.get("last_seen").asInt()
			out.Observations = append(out.Observations, e)
		}
	}
	return out, nil
}
