package converge

// The notary's transparency log, client side (pure): the bundle's "transparency" member and
// the check of an extended answer's proof of inclusion (docs/transparency.md, "Clients").
// Checkpoints are c2sp.org/signed-note notes opened with golang.org/x/mod/sumdb/note (the
// log's key through note.NewVerifier, the witnesses' timestamped cosignatures of
// c2sp.org/tlog-cosignature through cosignatureVerifier); the inclusion proof is checked
// with our own RFC 9162 loop (checkInclusion) over golang.org/x/mod/sumdb/tlog's hashes.

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Failure kinds of the transparency check (votes of the notary whose answer failed it).
const (
	RejectLogMissing    = "log-missing"
	RejectLogProof      = "log-proof"
	RejectLogCheckpoint = "log-checkpoint"
	RejectLogWitness    = "log-witness"
	RejectLogEntry      = "log-entry"
)

// Bounds and constants of the log's formats.
const (
	logEntryType      = "converge-observation/1"
	maxLogProof       = 63
	maxLogNote        = 64 * 1024
	maxLogWitnesses   = 32
	noteKeyEd25519    = 0x01
	noteKeyCosignV1   = 0x04
	cosignatureLength = 8 + ed25519.SignatureSize
)

// transparencyMember ends the signed statement when an answer carries a proof.
var transparencyMember = []byte(`,"transparency":`)

var (
	keyIDHexRE     = regexp.MustCompile(`^[0-9a-f]{8}$`)
	checkpointSize = regexp.MustCompile(`^(0|[1-9][0-9]{0,18})$`)
)

// NoteKey is a signed-note verifier key: <name>+<8 hex key id>+<base64 of type || key>.
type NoteKey struct {
	Name      string
	KeyID     uint32
	PublicKey ed25519.PublicKey
	VKey      string // as written in the bundle
}

// LogPolicy is a bundle's "transparency" member: the log's key, where the log is served, the
// witnesses and how many of them must have cosigned a checkpoint.
type LogPolicy struct {
	Log             NoteKey
	URL             string
	Witnesses       []NoteKey
	MinCosignatures int
	logVerifier     note.Verifier
}

// LogProof is what a valid member proves: the entry at Index of the log's tree of TreeSize.
type LogProof struct {
	Log        string
	Index      int64
	TreeSize   int64
	Root       []byte
	CosignedBy []string
	Entry      map[string]any
}

func validNoteName(name string) bool {
	return name != "" && utf8.ValidString(name) && !strings.Contains(name, "+") &&
		strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) < 0
}

func noteKeyID(name string, typ byte, key []byte) uint32 {
	h := sha256.New()
	h.Write([]byte(name + "\n"))
	h.Write([]byte{typ})
	h.Write(key)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

// strictB64 is padded standard base64 without the line breaks encoding/base64 skips.
func strictB64(s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, errors.New("not base64")
	}
	return base64.StdEncoding.DecodeString(s)
}

// ParseNoteKey parses a verifier key of type typ (0x01: Ed25519 signatures, 0x04: timestamped
// Ed25519 cosignatures) and checks its key id. A key of small order or not in canonical form
// is refused (weakKey).
func ParseNoteKey(text string, typ byte) (NoteKey, error) {
	parts := strings.SplitN(text, "+", 3)
	if len(text) > 1024 || len(parts) != 3 || !validNoteName(parts[0]) || !keyIDHexRE.MatchString(parts[1]) {
		return NoteKey{}, fmt.Errorf("%.80q is not <name>+<8 hex>+<base64 key>", text)
	}
	raw, err := strictB64(parts[2])
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || raw[0] != typ {
		return NoteKey{}, fmt.Errorf("%.80q is not a type 0x%02x Ed25519 key", text, typ)
	}
	if weak := weakKey(raw[1:]); weak != "" {
		return NoteKey{}, fmt.Errorf("%.80q: %s", text, weak)
	}
	id, _ := hex.DecodeString(parts[1])
	if binary.BigEndian.Uint32(id) != noteKeyID(parts[0], typ, raw[1:]) {
		return NoteKey{}, fmt.Errorf("%.80q: the key id does not match the key", text)
	}
	return NoteKey{parts[0], binary.BigEndian.Uint32(id), ed25519.PublicKey(raw[1:]), text}, nil
}

// NewLogPolicy builds a policy from verifier keys (the log's, type 0x01; the witnesses',
// type 0x04).
func NewLogPolicy(logKey string, witnesses []string, minCosignatures int) (*LogPolicy, error) {
	log, err := ParseNoteKey(logKey, noteKeyEd25519)
	if err != nil {
		return nil, bundleErr("transparency log key: %v", err)
	}
	lv, err := note.NewVerifier(logKey)
	if err != nil {
		return nil, bundleErr("transparency log key: %v", err)
	}
	p := &LogPolicy{Log: log, MinCosignatures: minCosignatures, logVerifier: lv}
	seen := map[[2]string]bool{}
	for _, w := range witnesses {
		k, err := ParseNoteKey(w, noteKeyCosignV1)
		if err != nil {
			return nil, bundleErr("witness key: %v", err)
		}
		id := [2]string{k.Name, strconv.FormatUint(uint64(k.KeyID), 16)}
		if seen[id] {
			return nil, bundleErr("a witness is listed twice")
		}
		seen[id] = true
		p.Witnesses = append(p.Witnesses, k)
	}
	// One key under two names: a cosignature does not sign the witness's name, so one key
	// would count as two witnesses (or the log would cosign its own checkpoints).
	raws := map[string]bool{string(log.PublicKey): true}
	for _, w := range p.Witnesses {
		if raws[string(w.PublicKey)] {
			return nil, bundleErr("transparency names one key twice (two witnesses, or a witness and the log)")
		}
		raws[string(w.PublicKey)] = true
	}
	if minCosignatures < 0 || minCosignatures > len(p.Witnesses) {
		return nil, bundleErr("min_cosignatures must be an integer from 0 to %d", len(p.Witnesses))
	}
	return p, nil
}

// parseLogPolicy reads a bundle's "transparency" member; errors have kind "bundle".
func parseLogPolicy(v any) (*LogPolicy, error) {
	obj, ok := jObject(v)
	if !ok {
		return nil, bundleErr("transparency must be an object")
	}
	for k := range obj {
		switch k {
		case "log", "url", "witnesses", "min_cosignatures":
		default:
			return nil, bundleErr("unknown transparency field %q", k)
		}
	}
	logKey, ok := jString(obj["log"])
	if !ok {
		return nil, bundleErr("transparency log key must be a string")
	}
	url := ""
	if u, has := obj["url"]; has && u != nil {
		s, ok := jString(u)
		if !ok || !strings.HasPrefix(s, "https://") || len([]rune(s)) > 2048 {
			return nil, bundleErr("transparency url must be an https:// URL")
		}
		url = s
	}
	list := []any{}
	if w, has := obj["witnesses"]; has {
		if list, ok = jArray(w); !ok || len(list) > maxLogWitnesses {
			return nil, bundleErr("transparency witnesses must be a list of at most %d", maxLogWitnesses)
		}
	}
	var vkeys []string
	for _, x := range list {
		w, ok := jObject(x)
		name, ok1 := jString(w["name"])
		vkey, ok2 := jString(w["vkey"])
		if !ok || len(w) != 2 || !ok1 || !ok2 {
			return nil, bundleErr("a witness is an object with name and vkey")
		}
		if k, err := ParseNoteKey(vkey, noteKeyCosignV1); err == nil && k.Name != name {
			return nil, bundleErr("witness name %.80q is not its key's name", name)
		}
		vkeys = append(vkeys, vkey)
	}
	need := int64(0)
	if n, has := obj["min_cosignatures"]; has {
		if need, ok = jInt(n); !ok || need < 0 || need > int64(len(vkeys)) {
			return nil, bundleErr("min_cosignatures must be an integer from 0 to %d", len(vkeys))
		}
	}
	p, err := NewLogPolicy(logKey, vkeys, int(need))
	if err != nil {
		return nil, err
	}
	p.URL = url
	return p, nil
}

// cosignatureVerifier is a note.Verifier for c2sp.org/tlog-cosignature (type 0x04): the
// signature is the 8-byte big-endian time then Ed25519 over "cosignature/v1\ntime <t>\n"
// followed by the note text.
type cosignatureVerifier struct{ key NoteKey }

func (v cosignatureVerifier) Name() string    { return v.key.Name }
func (v cosignatureVerifier) KeyHash() uint32 { return v.key.KeyID }
func (v cosignatureVerifier) Verify(msg, sig []byte) bool {
	if len(sig) != cosignatureLength {
		return false
	}
	t := binary.BigEndian.Uint64(sig[:8])
	signed := append([]byte(fmt.Sprintf("cosignature/v1\ntime %d\n", t)), msg...)
	return ed25519.Verify(v.key.PublicKey, signed, sig[8:])
}

func logFail(kind, format string, args ...any) error { return reject(kind, format, args...) }

// OpenCheckpoint checks a signed checkpoint (steps 3 and 4): signed by the log's key, origin
// the key's name, cosigned by at least MinCosignatures of the witnesses. Errors are
// *AnswerRejected of kind log-checkpoint or log-witness.
func (p *LogPolicy) OpenCheckpoint(text string) (*LogProof, error) {
	msg := []byte(text)
	if len(msg) > maxLogNote {
		return nil, logFail(RejectLogCheckpoint, "checkpoint larger than %d bytes", maxLogNote)
	}
	for _, r := range text {
		if r >= 0x7f && r <= 0x9f {
			return nil, logFail(RejectLogCheckpoint, "control character in the checkpoint")
		}
	}
	n, err := note.Open(msg, note.VerifierList(p.logVerifier))
	if err != nil {
		return nil, logFail(RejectLogCheckpoint, "checkpoint: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(n.Text, "\n"), "\n")
	for _, l := range lines {
		if l == "" {
			return nil, logFail(RejectLogCheckpoint, "checkpoint: an empty line in the text")
		}
	}
	if len(lines) < 3 || !checkpointSize.MatchString(lines[1]) {
		return nil, logFail(RejectLogCheckpoint, "checkpoint: not origin, size and root")
	}
	root, err := strictB64(lines[2])
	if err != nil || len(root) != sha256.Size {
		return nil, logFail(RejectLogCheckpoint, "checkpoint: the root is not 32 bytes of base64")
	}
	if lines[0] != p.Log.Name {
		return nil, logFail(RejectLogCheckpoint, "checkpoint: origin %.80q is not the log's", lines[0])
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		return nil, logFail(RejectLogCheckpoint, "checkpoint: the size is beyond 2^63-1")
	}
	out := &LogProof{Log: lines[0], TreeSize: size, Root: root, CosignedBy: []string{}}
	if len(p.Witnesses) > 0 {
		vs := make([]note.Verifier, len(p.Witnesses))
		for i, w := range p.Witnesses {
			vs[i] = cosignatureVerifier{w}
		}
		cn, err := note.Open(msg, note.VerifierList(vs...))
		var unverified *note.UnverifiedNoteError
		switch {
		case errors.As(err, &unverified):
		case err != nil:
			return nil, logFail(RejectLogWitness, "checkpoint: %v", err)
		default:
			for _, s := range cn.Sigs {
				out.CosignedBy = append(out.CosignedBy, s.Name)
			}
		}
	}
	if len(out.CosignedBy) < p.MinCosignatures {
		return nil, logFail(RejectLogWitness, "checkpoint cosigned by %d of the bundle's witnesses, %d required",
			len(out.CosignedBy), p.MinCosignatures)
	}
	return out, nil
}

// sameJSONValue: both absent or null, or equal strings, or equal integers.
func sameJSONValue(a, b any) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if s, ok := jString(a); ok {
		t, ok := jString(b)
		return ok && s == t
	}
	i, ok1 := jInt(a)
	j, ok2 := jInt(b)
	return ok1 && ok2 && i == j
}

// CheckMember checks an answer's "transparency" member (its raw bytes, nil when absent) for
// the statement's target (host, port, ip) and the fingerprint asked about, in the six steps of
// docs/transparency.md; every failure is an *AnswerRejected of a log-* kind.
func (p *LogPolicy) CheckMember(member []byte, target map[string]any, fp Fingerprint) (*LogProof, error) {
	if member == nil {
		return nil, logFail(RejectLogMissing, "the answer carries no proof of inclusion in the log")
	}
	obj, err := decodeObject(member)
	if err == nil {
		err = boundsScan(member)
	}
	if err != nil {
		return nil, logFail(RejectLogProof, "transparency member is not bounded strict JSON: %v", err)
	}
	checkpoint, ok1 := jString(obj["checkpoint"])
	entryText, ok2 := jString(obj["entry"])
	index, ok3 := jInt(obj["index"])
	proofList, ok4 := jArray(obj["proof"])
	if !ok1 || !ok2 || !ok3 || index < 0 || !ok4 || len(proofList) > maxLogProof {
		return nil, logFail(RejectLogProof, "transparency member lacks checkpoint, entry, index or proof")
	}
	proofText := make([]string, len(proofList))
	for i, x := range proofList {
		s, ok := jString(x)
		if !ok {
			return nil, logFail(RejectLogProof, "a proof hash is not a string")
		}
		proofText[i] = s
	}
	out, err := p.OpenCheckpoint(checkpoint)
	if err != nil {
		return nil, err
	}
	entry, err := strictB64(entryText)
	var doc map[string]any
	if err == nil {
		if err = boundsScan(entry); err == nil {
			doc, err = decodeObject(entry)
		}
	}
	if err != nil {
		return nil, logFail(RejectLogEntry, "the logged entry is not base64 of a JSON object: %v", err)
	}
	if typ, _ := jString(doc["type"]); typ != logEntryType {
		return nil, logFail(RejectLogEntry, "the logged entry is not a %s", logEntryType)
	}
	for _, name := range []string{"host", "port", "ip"} {
		if !sameJSONValue(doc[name], target[name]) {
			return nil, logFail(RejectLogEntry, "the logged entry's %s is not the answer's", name)
		}
	}
	if got, _ := jString(doc[fp.Algorithm]); got != fp.ColonHex() {
		return nil, logFail(RejectLogEntry, "the logged entry is about another certificate")
	}
	proof := make(tlog.RecordProof, len(proofText))
	for i, s := range proofText {
		h, err := strictB64(s)
		if err != nil || len(h) != tlog.HashSize {
			return nil, logFail(RejectLogProof, "proof hash %d is not 32 bytes of base64", i)
		}
		copy(proof[i][:], h)
	}
	var root tlog.Hash
	copy(root[:], out.Root)
	if err := checkInclusion(proof, out.TreeSize, root, index, tlog.RecordHash(entry)); err != nil {
		return nil, logFail(RejectLogProof, "inclusion proof: %v", err)
	}
	out.Index, out.Entry = index, doc
	return out, nil
}

// checkInclusion verifies that leaf is at index in the tree of size with root (RFC 9162,
// 2.1.3.2), for every size an int64 holds. tlog.CheckRecord computes the largest power of
// two below the size in an int64 that wraps past 2^62 and then loops for ever, so a signed
// checkpoint of a size above 2^62 held a goroutine at full CPU.
func checkInclusion(proof tlog.RecordProof, size int64, root tlog.Hash, index int64, leaf tlog.Hash) error {
	if index < 0 || size <= 0 || index >= size {
		return fmt.Errorf("index %d is not in a tree of size %d", index, size)
	}
	fn, sn := uint64(index), uint64(size-1)
	r := leaf
	for _, p := range proof {
		if sn == 0 {
			return errors.New("proof is longer than the tree allows")
		}
		if fn&1 == 1 || fn == sn {
			r = tlog.NodeHash(p, r)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			r = tlog.NodeHash(r, p)
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 {
		return errors.New("proof is shorter than the tree needs")
	}
	if r != root {
		return errors.New("proof does not lead to the checkpoint's root")
	}
	return nil
}

// splitMember cuts the statement bytes at the first `,"transparency":` (nil member: absent).
func splitMember(body []byte) (stmt, member []byte) {
	if i := bytes.Index(body, transparencyMember); i >= 0 {
		return body[:i], body[i+len(transparencyMember):]
	}
	return body, nil
}
