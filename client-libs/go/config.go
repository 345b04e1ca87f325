package converge

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Configuration discovery and the converge.config keys are those of the Python client:
//
//  1. an explicit directory (must exist);
//  2. $CONVERGE_CONFIG_DIR (must exist when set);
//  3. ~/.config/converge ($XDG_CONFIG_HOME/converge when set), if it exists;
//  4. /usr/local/etc/converge, if it exists.
//
// Layout: converge.config (JSON, every key optional), notaries-available/*.notary and
// notaries-enabled/*.notary symlinks to ../notaries-available/... .

const (
	ConfigFile           = "converge.config"
	ConfigEnvVar         = "CONVERGE_CONFIG_DIR"
	SystemConfigDir      = "/usr/local/etc/converge"
	maxConfigBytes       = 64 * 1024
	maxNotaryFiles       = 64
	DefaultCacheLifetime = 7 * 24 * 3600
)

// Policy is the consensus rule: "consensus", "majority" or "minority".
type Policy string

const (
	Consensus Policy = "consensus"
	Majority  Policy = "majority"
	Minority  Policy = "minority"
)

// ParsePolicy accepts the three policy names, any case, surrounding space ignored.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(strings.ToLower(strings.TrimSpace(s))); p {
	case Consensus, Majority, Minority:
		return p, nil
	}
	return "", badInput(KindConfig, "notary-agreement must be consensus, majority or minority, not %q", s)
}

// Config is everything a check needs. Build it with LoadConfig or by hand (Bundles then
// replaces the notaries directory).
type Config struct {
	Directory        string
	DB               string // "" = no cache
	UserDB           string
	NotariesDir      string
	Agreement        Policy
	Quorum           int
	ConnectTimeout   float64 // seconds
	NotaryTimeout    float64
	TotalTimeout     float64
	CacheLifetime    *float64 // nil = forever
	StandAside       bool
	EarlyReturn      bool
	MaxResponseBytes int
	Bounce           bool
	BouncePort       int
	Extended         string    // off, prefer (default), fallback, require
	ExtendedNonce    bool      // a fresh random nonce with every extended query
	MaxSkew          int64     // seconds an extended answer's time may differ from ours
	Bundles          []*Bundle // when non-nil, used instead of NotariesDir
	// DisableKeepAlives: one connection per extended query, as for legacy ones (an API
	// setting, not a key of the configuration file the languages share)
	DisableKeepAlives bool
}

// DefaultConfig holds the defaults of every key (no directory, no cache, no notaries).
func DefaultConfig() Config {
	lifetime := float64(DefaultCacheLifetime)
	return Config{
		Agreement: Majority, Quorum: 3, ConnectTimeout: 3, NotaryTimeout: 5, TotalTimeout: 10,
		CacheLifetime: &lifetime, StandAside: true, EarlyReturn: true,
		MaxResponseBytes: 256 * 1024, BouncePort: 4242,
		Extended: ExtendedPrefer, ExtendedNonce: true, MaxSkew: DefaultMaxSkew,
	}
}

func userConfigDir(getenv func(string) string) string {
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "converge")
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".config", "converge")
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// DiscoverConfigDir finds the configuration directory (explicit may be "").
func DiscoverConfigDir(explicit string, getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if explicit != "" {
		if !isDir(explicit) {
			return "", badInput(KindConfig, "configuration directory %s does not exist", explicit)
		}
		return explicit, nil
	}
	if d := getenv(ConfigEnvVar); d != "" {
		if !isDir(d) {
			return "", badInput(KindConfig, "$%s=%s is not a directory", ConfigEnvVar, d)
		}
		return d, nil
	}
	for _, d := range []string{userConfigDir(getenv), SystemConfigDir} {
		if isDir(d) {
			return d, nil
		}
	}
	return "", badInput(KindConfig, "no configuration: set $%s, or create %s or %s",
		ConfigEnvVar, userConfigDir(getenv), SystemConfigDir)
}

var knownConfigKeys = map[string]bool{
	"db": true, "userdb": true, "notaries-dir": true, "notary-agreement": true, "quorum": true,
	"connect-timeout": true, "notary-timeout": true, "total-timeout": true,
	"cache-lifetime": true, "stand-aside": true, "early-return": true, "bounce": true,
	"bounce-port": true, "max-response-bytes": true, "extended": true, "extended-nonce": true,
	"max-skew": true,
}

func cfgErr(format string, args ...any) error { return badInput(KindConfig, format, args...) }

func cfgNumber(raw map[string]any, key string, def, low, high float64) (float64, error) {
	v, has := raw[key]
	if !has {
		return def, nil
	}
	f, ok := jFloat(v)
	if !ok || !(f >= low && f <= high) {
		return 0, cfgErr("%s must be a number in [%g, %g]", key, low, high)
	}
	return f, nil
}

func cfgInt(raw map[string]any, key string, def, low, high int64, what string) (int, error) {
	v, has := raw[key]
	if !has {
		return int(def), nil
	}
	n, ok := jInt(v)
	if !ok || n < low || n > high {
		return 0, cfgErr("%s must be %s", key, what)
	}
	return int(n), nil
}

func cfgBool(raw map[string]any, key string, def bool) (bool, error) {
	v, has := raw[key]
	if !has {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, cfgErr("%s must be true or false", key)
	}
	return b, nil
}

func expandUser(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[1:])
		}
	}
	return p
}

func cfgPath(dir string, raw map[string]any, key, def string) (string, error) {
	v, has := raw[key]
	if !has {
		if def == "" {
			return "", nil
		}
		return filepath.Join(dir, def), nil
	}
	if v == nil {
		return "", nil
	}
	s, ok := jString(v)
	if !ok || s == "" {
		return "", cfgErr("%s must be a path", key)
	}
	s = expandUser(s)
	if filepath.IsAbs(s) {
		return s, nil
	}
	return filepath.Join(dir, s), nil
}

// ParseConfig validates the decoded converge.config of dir (raw must be an object).
func parseConfig(dir string, raw map[string]any) (Config, error) {
	var unknown []string
	for k := range raw {
		if !knownConfigKeys[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Config{}, cfgErr("unknown configuration keys: %s", strings.Join(unknown, ", "))
	}
	c := DefaultConfig()
	c.Directory = dir
	var err error
	if c.BouncePort, err = cfgInt(raw, "bounce-port", 4242, 1, 65535, "an integer port 1..65535"); err != nil {
		return Config{}, err
	}
	if v, has := raw["cache-lifetime"]; has && v == nil {
		c.CacheLifetime = nil
	} else {
		f, err := cfgNumber(raw, "cache-lifetime", DefaultCacheLifetime, 0, 10*365*86400)
		if err != nil {
			return Config{}, err
		}
		c.CacheLifetime = &f
	}
	if c.Quorum, err = cfgInt(raw, "quorum", 3, 1, 16, "an integer 1..16"); err != nil {
		return Config{}, err
	}
	if c.MaxResponseBytes, err = cfgInt(raw, "max-response-bytes", 256*1024, 1024, 16*1024*1024, "an integer 1024..16777216"); err != nil {
		return Config{}, err
	}
	if v, has := raw["extended"]; has {
		m, _ := jString(v)
		switch m {
		case ExtendedOff, ExtendedPrefer, ExtendedFallback, ExtendedRequire:
			c.Extended = m
		default:
			return Config{}, cfgErr("extended must be one of off, prefer, fallback, require")
		}
	}
	if v, has := raw["max-skew"]; has {
		n, ok := jInt(v)
		if !ok || n < 0 || n > 86400 {
			return Config{}, cfgErr("max-skew must be an integer 0..86400 (seconds)")
		}
		c.MaxSkew = n
	}
	if c.ExtendedNonce, err = cfgBool(raw, "extended-nonce", true); err != nil {
		return Config{}, err
	}
	if v, has := raw["notary-agreement"]; has {
		s, ok := jString(v)
		if !ok {
			return Config{}, cfgErr("notary-agreement must be a string")
		}
		if c.Agreement, err = ParsePolicy(s); err != nil {
			return Config{}, err
		}
	}
	if c.DB, err = cfgPath(dir, raw, "db", "cache.sqlite3"); err != nil {
		return Config{}, err
	}
	if c.UserDB, err = cfgPath(dir, raw, "userdb", ""); err != nil {
		return Config{}, err
	}
	if c.NotariesDir, err = cfgPath(dir, raw, "notaries-dir", "."); err != nil {
		return Config{}, err
	}
	if c.ConnectTimeout, err = cfgNumber(raw, "connect-timeout", 3, 0.01, 600); err != nil {
		return Config{}, err
	}
	if c.NotaryTimeout, err = cfgNumber(raw, "notary-timeout", 5, 0.01, 600); err != nil {
		return Config{}, err
	}
	if c.TotalTimeout, err = cfgNumber(raw, "total-timeout", 10, 0.01, 3600); err != nil {
		return Config{}, err
	}
	if c.StandAside, err = cfgBool(raw, "stand-aside", true); err != nil {
		return Config{}, err
	}
	if c.EarlyReturn, err = cfgBool(raw, "early-return", true); err != nil {
		return Config{}, err
	}
	if c.Bounce, err = cfgBool(raw, "bounce", false); err != nil {
		return Config{}, err
	}
	return c, nil
}

// LoadConfig discovers (explicit may be "") and loads a configuration directory.
func LoadConfig(explicit string) (Config, error) {
	dir, err := DiscoverConfigDir(explicit, nil)
	if err != nil {
		return Config{}, err
	}
	f := filepath.Join(dir, ConfigFile)
	raw := map[string]any{}
	if _, err := os.Stat(f); err == nil {
		data, err := readBounded(f, maxConfigBytes)
		if err != nil {
			return Config{}, cfgErr("cannot read %s: %v", f, err)
		}
		doc, err := decodeJSON(data)
		if err != nil {
			return Config{}, cfgErr("%s is not JSON: %v", f, err)
		}
		var ok bool
		if raw, ok = jObject(doc); !ok {
			return Config{}, cfgErr("%s must hold a JSON object", f)
		}
	}
	return parseConfig(dir, raw)
}

func readBounded(path string, limit int) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) > limit {
		return nil, cfgErr("%s larger than %d bytes", path, limit)
	}
	return data, nil
}

// NotaryFile is one bundle of notaries-available/ (or a plain file in notaries-enabled/).
type NotaryFile struct {
	Bundle  *Bundle
	Enabled bool
	Path    string
}

// hasSubfolders reports whether notariesDir holds notaries-available/ or notaries-enabled/.
func hasSubfolders(notariesDir string) bool {
	return isDir(filepath.Join(notariesDir, "notaries-available")) ||
		isDir(filepath.Join(notariesDir, "notaries-enabled"))
}

// IsFlatLayout reports whether notariesDir is the 2014 libraries' layout: notaries-dir names
// the enabled folder itself, which holds .notary files and neither subfolder.
func IsFlatLayout(notariesDir string) bool {
	if hasSubfolders(notariesDir) {
		return false
	}
	matches, _ := filepath.Glob(filepath.Join(notariesDir, "*.notary"))
	return len(matches) > 0
}

// WhereNotariesAreRead says where ListNotaries looks, for "no notaries enabled" messages.
func WhereNotariesAreRead(notariesDir string) string {
	if notariesDir == "" {
		return "no notaries-dir"
	}
	standard := filepath.Join(notariesDir, "notaries-enabled") + "/"
	if hasSubfolders(notariesDir) {
		return standard
	}
	return standard + " and " + filepath.Join(notariesDir, "*.notary")
}

// ListNotaries reads every bundle in notariesDir, sorted by file name; plain files placed in
// notaries-enabled/ count as enabled bundles too. In the 2014 layout (IsFlatLayout) every
// .notary file of notariesDir itself is enabled, symlinks followed.
func ListNotaries(notariesDir string) ([]NotaryFile, error) {
	avail := filepath.Join(notariesDir, "notaries-available")
	enabledDir := filepath.Join(notariesDir, "notaries-enabled")
	enabledTargets := map[string]bool{}
	var extra []string
	flat := IsFlatLayout(notariesDir)
	if flat {
		matches, _ := filepath.Glob(filepath.Join(notariesDir, "*.notary"))
		sort.Strings(matches)
		for _, p := range matches {
			if _, err := os.Stat(p); err == nil { // a dangling link is ignored
				extra = append(extra, p)
			}
		}
	} else if isDir(enabledDir) {
		matches, _ := filepath.Glob(filepath.Join(enabledDir, "*.notary"))
		sort.Strings(matches)
		for _, p := range matches {
			st, err := os.Lstat(p)
			if err != nil {
				continue
			}
			if st.Mode()&os.ModeSymlink != 0 {
				if real, err := filepath.EvalSymlinks(p); err == nil {
					if abs, err := filepath.Abs(real); err == nil {
						enabledTargets[abs] = true
					}
				}
			} else {
				extra = append(extra, p)
			}
		}
	}
	var files []string
	if !flat && isDir(avail) {
		files, _ = filepath.Glob(filepath.Join(avail, "*.notary"))
		sort.Strings(files)
	}
	if len(files)+len(extra) > maxNotaryFiles {
		return nil, cfgErr("more than %d notary bundles", maxNotaryFiles)
	}
	var out []NotaryFile
	isExtra := map[string]bool{}
	for _, p := range extra {
		isExtra[p] = true
	}
	for _, p := range append(files, extra...) {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, cfgErr("cannot read %s: %v", p, err)
		}
		b, err := ParseBundle(data)
		if err != nil {
			return nil, bundleErr("%s: %v", p, err.(*Error).Message)
		}
		enabled := isExtra[p]
		if !enabled {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				if abs, err := filepath.Abs(real); err == nil {
					enabled = enabledTargets[abs]
				}
			}
		}
		out = append(out, NotaryFile{b, enabled, p})
	}
	return out, nil
}

// Notaries returns the enabled logical notaries, de-duplicated by name (first file wins).
func (c *Config) Notaries() ([]*Bundle, error) {
	var found []*Bundle
	if c.Bundles != nil {
		found = c.Bundles
	} else if c.NotariesDir != "" {
		files, err := ListNotaries(c.NotariesDir)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if f.Enabled {
				found = append(found, f.Bundle)
			}
		}
	}
	seen := map[string]bool{}
	var out []*Bundle
	for _, b := range found {
		if !seen[b.Name] {
			seen[b.Name] = true
			out = append(out, b)
		}
	}
	return out, nil
}
