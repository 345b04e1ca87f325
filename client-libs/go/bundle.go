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
	Alg        string
	KeyID      string
	PublicKey  []byte // raw 32 bytes
	Status     string // "current" or "retired"
	ValidUntil int64  // retired keys: unix seconds; 0 = none given
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

func jsonPort(obj *jsonValue, key string) (int, error) {
	n, ok := obj.get(key).asInt()
	if !ok || n < 1 || n > 65535 {
		return 0, bundleErr("%s must be an integer port 1..65535", key)
	}
	return int(n), nil
}

func parseNotaryHost(obj *jsonValue) (NotaryHost, error) {
	if obj == nil || obj.kind != jObject {
		return NotaryHost{}, bundleErr("a host entry must be an object")
	}
	name, ok := obj.get("host").asString()
	if !ok || !hostRE.MatchString(name) {
		return NotaryHost{}, bundleErr("host must be a DNS name or an IP address")
	}
	pemText, ok := obj.get("certificate").asString()
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
	obj, err := parseJSON(data)
	if err != nil {
		return nil, bundleErr("bundle is not JSON: %v", err)
	}
	if obj.kind != jObject {
		return nil, bundleErr("bundle is not a JSON object")
	}
	version := int64(0)
	if obj.has("version") {
		vv := obj.get("version")
		v, ok := vv.asInt()
		if vv.kind == jFloat && (vv.f == 0 || vv.f == 1) { // Python: 1.0 in (0, 1)
			v, ok = int64(vv.f), true
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
	name, ok := obj.get("name").asString()
	if !ok || strings.TrimSpace(name) == "" || len([]rune(name)) > maxBundleName {
		return nil, bundleErr("name must be a non-empty string")
	}
	hosts := obj.get("hosts")
	if hosts == nil || hosts.kind != jArray || len(hosts.arr) == 0 {
		return nil, bundleErr("hosts must be a non-empty list")
	}
	if len(hosts.arr) > MaxBundleHosts {
		return nil, bundleErr("more than %d hosts", MaxBundleHosts)
	}
	b := &Bundle{Name: name, Version: 1}
	if loc := obj.get("bundle_location"); loc != nil && loc.kind != jNull {
		s, ok := loc.asString()
		if !ok || !strings.HasPrefix(s, "https://") || !strings.HasSuffix(s, ".notary") || len([]rune(s)) > 2048 {
			return nil, bundleErr("bundle_location must be an https:// URL ending in .notary")
		}
		b.BundleLocation = s
	}
	if reg := obj.get("region"); reg != nil && reg.kind != jNull {
		s, ok := reg.asString()
		if !ok || !regionRE.MatchString(s) {
			return nil, bundleErr("region must be an ISO-3166 alpha-2 code")
		}
		b.Region = strings.ToUpper(s)
	}
	for _, h := range hosts.arr {
		nh, err := parseNotaryHost(h)
		if err != nil {
			return nil, err
		}
		b.Hosts = append(b.Hosts, nh)
	}
	// Extended-format fields; legacy clients ignore them, and so does this parser when they
	// are malformed (the bundle then simply does not offer the extended format).
	if p := obj.get("protocols"); p != nil && p.kind == jArray {
		for _, x := range p.arr {
			if s, ok := x.asString(); ok {
				b.Protocols = append(b.Protocols, s)
			}
		}
	}
	if ks := obj.get("signing_keys"); ks != nil && ks.kind == jArray {
		for _, k := range ks.arr {
			if sk, ok := parseSigningKey(k); ok {
				b.SigningKeys = append(b.SigningKeys, sk)
			}
		}
	}
	return b, nil
}

func parseSigningKey(k *jsonValue) (SigningKey, bool) {
	alg, ok1 := k.get("alg").asString()
	kid, ok2 := k.get("key_id").asString()
	pub, ok3 := k.get("public_key").asString()
	status, _ := k.get("status").asString()
	if !ok1 || !ok2 || !ok3 || alg != "ed25519" {
		return SigningKey{}, false
	}
	raw, err := unb64url(pub)
	if err != nil || len(raw) != 32 || keyIDOf(raw) != kid {
		return SigningKey{}, false
	}
	until, _ := k.get("valid_until").asInt()
	if status == "" {
		status = "current"
	}
	return SigningKey{alg, kid, raw, status, until}, true
}
