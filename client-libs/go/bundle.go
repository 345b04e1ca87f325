package converge

import (
	"crypto/x509"
	"encoding/pem"
	"regexp"
	"strings"
)

// Bounds on bundles.
const (
	MaxBundleBytes = 64 * 1024
	MaxBundleHosts = 16
	maxBundleName  = 200
)

var (
	hostRE   = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,253}$`)
	pemRE    = regexp.MustCompile(`^\s*-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----\s*$`)
	regionRE = regexp.MustCompile(`^[A-Za-z]{2}$`)
)

// NotaryHost is one physical host of a notary; Pin is the SHA-1 of its certificate.
type NotaryHost struct {
	Host           string
	SSLPort        int
	HTTPPort       int
	CertificatePEM string
	Certificate    *x509.Certificate
	Pin            Fingerprint
}

// SigningKey is one Ed25519 key of the extended format listed in a bundle.
type SigningKey struct {
	Alg           string
	KeyID         string
	PublicKey     []byte // raw 32 bytes
	PublicKeyText string // as written in the bundle (unpadded base64url)
	Status        string // "current" or "retired"
	ValidUntil    int64  // retired keys: unix seconds
}

// Bundle is one logical notary (an organisation), parsed from a .notary file.
type Bundle struct {
	Name           string
	Version        int
	Hosts          []NotaryHost
	BundleLocation string
	Region         string
	Protocols      []string
	SigningKeys    []SigningKey
	// Transparency names the notary's log, its witnesses and how many cosignatures a
	// client requires (nil: no log; docs/transparency.md, "Clients").
	Transparency *LogPolicy
}

// Offers reports whether the bundle lists protocol p (e.g. "converge-answer/1").
func (b *Bundle) Offers(p string) bool {
	for _, x := range b.Protocols {
		if x == p {
			return true
		}
	}
	return false
}

func bundleErr(format string, args ...any) error { return badInput(KindBundle, format, args...) }

func jsonPort(obj map[string]any, key string) (int, error) {
	n, ok := jInt(obj[key])
	if !ok || n < 1 || n > 65535 {
		return 0, bundleErr("%s must be an integer port 1..65535", key)
	}
	return int(n), nil
}

func parseNotaryHost(v any) (NotaryHost, error) {
	obj, ok := jObject(v)
	if !ok {
		return NotaryHost{}, bundleErr("a host entry must be an object")
	}
	name, ok := jString(obj["host"])
	if !ok || !hostRE.MatchString(name) {
		return NotaryHost{}, bundleErr("host must be a DNS name or an IP address")
	}
	pemText, ok := jString(obj["certificate"])
	if !ok || !pemRE.MatchString(pemText) {
		return NotaryHost{}, bundleErr("certificate of %s is not one PEM certificate", name)
	}
	block, _ := pem.Decode([]byte(strings.TrimLeft(pemText, " \t\r\n\v\f")))
	if block == nil || block.Type != "CERTIFICATE" {
		return NotaryHost{}, bundleErr("certificate of %s does not parse", name)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return NotaryHost{}, bundleErr("certificate of %s does not parse: %v", name, err)
	}
	sslPort, err := jsonPort(obj, "ssl_port")
	if err != nil {
		return NotaryHost{}, err
	}
	httpPort, err := jsonPort(obj, "http_port")
	if err != nil {
		return NotaryHost{}, err
	}
	return NotaryHost{name, sslPort, httpPort, pemText, cert, FingerprintOf(cert.Raw, "sha1")}, nil
}

// ParseBundle parses and validates a .notary file (v1, or the version-less v0 form).
// Errors have kind "bundle".
func ParseBundle(data []byte) (*Bundle, error) {
	if len(data) > MaxBundleBytes {
		return nil, bundleErr("bundle larger than %d bytes", MaxBundleBytes)
	}
	doc, err := decodeJSON(data)
	if err != nil {
		return nil, bundleErr("bundle is not JSON: %v", err)
	}
	obj, ok := jObject(doc)
	if !ok {
		return nil, bundleErr("bundle is not a JSON object")
	}
	version := int64(0)
	if vv, has := obj["version"]; has {
		v, ok := jInt(vv)
		if f, isNum := jFloat(vv); !ok && isNum && (f == 0 || f == 1) { // Python: 1.0 in (0, 1)
			v, ok = int64(f), true
		}
		if !ok || (v != 0 && v != 1) {
			return nil, bundleErr("unsupported bundle version")
		}
		version = v
	}
	if version == 0 {
		h, err := parseNotaryHost(obj)
		if err != nil {
			return nil, err
		}
		return &Bundle{Name: h.Host, Version: 0, Hosts: []NotaryHost{h}}, nil
	}
	name, ok := jString(obj["name"])
	if !ok || strings.TrimSpace(name) == "" || len([]rune(name)) > maxBundleName {
		return nil, bundleErr("name must be a non-empty string")
	}
	hosts, ok := jArray(obj["hosts"])
	if !ok || len(hosts) == 0 {
		return nil, bundleErr("hosts must be a non-empty list")
	}
	if len(hosts) > MaxBundleHosts {
		return nil, bundleErr("more than %d hosts", MaxBundleHosts)
	}
	b := &Bundle{Name: name, Version: 1}
	if loc := obj["bundle_location"]; loc != nil {
		s, ok := jString(loc)
		if !ok || !strings.HasPrefix(s, "https://") || !strings.HasSuffix(s, ".notary") || len([]rune(s)) > 2048 {
			return nil, bundleErr("bundle_location must be an https:// URL ending in .notary")
		}
		b.BundleLocation = s
	}
	if reg := obj["region"]; reg != nil {
		s, ok := jString(reg)
		if !ok || !regionRE.MatchString(s) {
			return nil, bundleErr("region must be an ISO-3166 alpha-2 code")
		}
		b.Region = strings.ToUpper(s)
	}
	for _, h := range hosts {
		nh, err := parseNotaryHost(h)
		if err != nil {
			return nil, err
		}
		b.Hosts = append(b.Hosts, nh)
	}
	// Optional fields of the extended format (legacy clients ignore them), validated as
	// strictly as the Python client does.
	if v, has := obj["protocols"]; has {
		if b.Protocols, err = parseProtocols(v); err != nil {
			return nil, err
		}
	}
	if v, has := obj["signing_keys"]; has {
		if b.SigningKeys, err = parseSigningKeys(v); err != nil {
			return nil, err
		}
	}
	if v, has := obj["transparency"]; has {
		if b.Transparency, err = parseLogPolicy(v); err != nil {
			return nil, err
		}
	}
	if b.Offers(ExtendedFormat) && len(b.SigningKeys) == 0 {
		return nil, bundleErr("protocols lists %s but the bundle has no signing_keys", ExtendedFormat)
	}
	return b, nil
}

// OffersExtended: the bundle advertises converge-answer/1 and carries its signing keys.
func (b *Bundle) OffersExtended() bool {
	return b.Offers(ExtendedFormat) && len(b.SigningKeys) > 0
}

const maxSigningKeys = 8

func parseProtocols(v any) ([]string, error) {
	list, ok := jArray(v)
	if !ok || len(list) > 16 {
		return nil, bundleErr("protocols must be a list of at most 16 strings")
	}
	out := []string{}
	for _, x := range list {
		s, ok := jString(x)
		if n := len([]rune(s)); !ok || n == 0 || n > 64 {
			return nil, bundleErr("protocols must be a list of short strings")
		}
		out = append(out, s)
	}
	return out, nil
}

func parseSigningKey(v any) (SigningKey, error) {
	k, ok := jObject(v)
	if !ok {
		return SigningKey{}, bundleErr("a signing key entry must be an object")
	}
	for key := range k {
		switch key {
		case "alg", "key_id", "public_key", "status", "valid_until":
		default:
			return SigningKey{}, bundleErr("unknown signing key field %q", key)
		}
	}
	if alg, _ := jString(k["alg"]); alg != "ed25519" {
		return SigningKey{}, bundleErr("signing key alg must be ed25519")
	}
	text, ok := jString(k["public_key"])
	raw, err := unb64url(text)
	if !ok || err != nil {
		return SigningKey{}, bundleErr("signing key public_key must be unpadded base64url")
	}
	if len(raw) != 32 {
		return SigningKey{}, bundleErr("an Ed25519 public key has 32 bytes")
	}
	if weak := weakKey(raw); weak != "" {
		return SigningKey{}, bundleErr("signing key: %s", weak)
	}
	kid, ok := jString(k["key_id"])
	if !ok || kid != keyIDOf(raw) {
		return SigningKey{}, bundleErr("signing key id %q does not match its public key", kid)
	}
	status, _ := jString(k["status"])
	until := k["valid_until"]
	sk := SigningKey{Alg: "ed25519", KeyID: kid, PublicKey: raw, PublicKeyText: text, Status: status}
	switch status {
	case "current":
		if until != nil {
			return SigningKey{}, bundleErr("a current signing key has no valid_until")
		}
	case "retired":
		n, ok := jInt(until)
		if !ok || n <= 0 || n > maxSafeInt {
			return SigningKey{}, bundleErr("a retired signing key needs valid_until (unix seconds)")
		}
		sk.ValidUntil = n
	default:
		return SigningKey{}, bundleErr("signing key status must be current or retired")
	}
	return sk, nil
}

func parseSigningKeys(v any) ([]SigningKey, error) {
	list, ok := jArray(v)
	if !ok || len(list) == 0 {
		return nil, bundleErr("signing_keys must be a non-empty list")
	}
	if len(list) > maxSigningKeys {
		return nil, bundleErr("more than %d signing keys", maxSigningKeys)
	}
	var out []SigningKey
	seen := map[string]bool{}
	current := 0
	for _, x := range list {
		k, err := parseSigningKey(x)
		if err != nil {
			return nil, err
		}
		if seen[k.KeyID] {
			return nil, bundleErr("signing key ids repeat")
		}
		seen[k.KeyID] = true
		if k.Status == "current" {
			current++
		}
		out = append(out, k)
	}
	if current != 1 {
		return nil, bundleErr("signing_keys must hold exactly one current key")
	}
	return out, nil
}
