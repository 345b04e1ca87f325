package converge

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// MaxFingerprintText bounds the text form of a fingerprint (in characters).
const MaxFingerprintText = 200

// Fingerprint is a certificate digest with its algorithm ("sha1" or "sha256").
type Fingerprint struct {
	Algorithm string
	Digest    []byte
}

// ColonHex is the canonical form: upper-case hex, a colon between bytes.
func (f Fingerprint) ColonHex() string {
	var b strings.Builder
	const digits = "0123456789ABCDEF"
	for i, c := range f.Digest {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteByte(digits[c>>4])
		b.WriteByte(digits[c&15])
	}
	return b.String()
}

func (f Fingerprint) String() string { return f.ColonHex() }

// Equal reports whether two fingerprints have the same algorithm and digest.
func (f Fingerprint) Equal(o Fingerprint) bool {
	return f.Algorithm == o.Algorithm && string(f.Digest) == string(o.Digest)
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// ParseFingerprint accepts 40 (SHA-1) or 64 (SHA-256) hex digits in any case, either with no
// separators or with a colon between every pair; surrounding spaces, tabs, CR and LF are
// ignored. Anything else is an error of kind "fingerprint".
func ParseFingerprint(text string) (Fingerprint, error) {
	if utf8.RuneCountInString(text) > MaxFingerprintText {
		return Fingerprint{}, badInput(KindFingerprint, "fingerprint longer than %d characters", MaxFingerprintText)
	}
	s := strings.Trim(text, " \t\r\n")
	if s == "" {
		return Fingerprint{}, badInput(KindFingerprint, "empty fingerprint")
	}
	var digits string
	if strings.Contains(s, ":") {
		groups := strings.Split(s, ":")
		for _, g := range groups {
			if len(g) != 2 || !isHex(g[0]) || !isHex(g[1]) {
				return Fingerprint{}, badInput(KindFingerprint, "colon-separated fingerprints need two hex digits per byte")
			}
		}
		digits = strings.Join(groups, "")
	} else {
		for i := 0; i < len(s); i++ {
			if !isHex(s[i]) {
				return Fingerprint{}, badInput(KindFingerprint, "fingerprint contains a non-hex character")
			}
		}
		if len(s)%2 != 0 {
			return Fingerprint{}, badInput(KindFingerprint, "odd number of hex digits")
		}
		digits = s
	}
	digest, err := hex.DecodeString(digits)
	if err != nil {
		return Fingerprint{}, badInput(KindFingerprint, "not hex: %v", err)
	}
	switch len(digest) {
	case sha1.Size:
		return Fingerprint{"sha1", digest}, nil
	case sha256.Size:
		return Fingerprint{"sha256", digest}, nil
	}
	return Fingerprint{}, badInput(KindFingerprint, "a fingerprint has 20 (SHA-1) or 32 (SHA-256) bytes, not %d", len(digest))
}

// FingerprintOf computes the fingerprint of a DER certificate ("sha1" or "sha256").
func FingerprintOf(der []byte, algorithm string) Fingerprint {
	if algorithm == "sha256" {
		d := sha256.Sum256(der)
		return Fingerprint{"sha256", d[:]}
	}
	d := sha1.Sum(der)
	return Fingerprint{"sha1", d[:]}
}
