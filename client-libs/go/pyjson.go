package converge

// A small JSON reader and two writers, because two rules of the protocol depend on exact
// bytes:
//
//   - legacy recipe (a) re-serialises a parsed body the way Python's json.dumps does with its
//     default settings (key order kept, ", " and ": " separators, ASCII-only output with
//     \uXXXX escapes, Python's float repr);
//   - the extended format is canonical JSON (RFC 8785) and a verifier compares
//     canonical(parse(body)) with the body.
//
// The reader follows Python's json.loads: NaN, Infinity and -Infinity are accepted, raw
// control characters in strings are not, a repeated key keeps its first position and its
// last value, lone UTF-16 surrogates from \u escapes are kept.

import (
	"bytes"
	"errors"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

const maxJSONDepth = 512

type jsonKind int

const (
	jNull jsonKind = iota
	jBool
	jInt
	jFloat
	jString
	jArray
	jObject
)

// jsonValue is one parsed value. Strings are kept as UTF-16 code units so that lone
// surrogates survive a round trip.
type jsonValue struct {
	kind  jsonKind
	b     bool
	num   string // jInt: the literal (normalised: no "-0"); jFloat: unused
	f     float64
	str   []uint16
	arr   []*jsonValue
	keys  [][]uint16
	vals  []*jsonValue
	index map[string]int
}

func (v *jsonValue) goString() string { return string(utf16.Decode(v.str)) }

// get returns an object member by key (nil when absent or v is not an object).
func (v *jsonValue) get(key string) *jsonValue {
	if v == nil || v.kind != jObject {
		return nil
	}
	if i, ok := v.index[key]; ok {
		return v.vals[i]
	}
	return nil
}

// has reports whether an object has the key.
func (v *jsonValue) has(key string) bool {
	if v == nil || v.kind != jObject {
		return false
	}
	_, ok := v.index[key]
	return ok
}

// asString returns the string value and whether v is a string.
func (v *jsonValue) asString() (string, bool) {
	if v == nil || v.kind != jString {
		return "", false
	}
	return v.goString(), true
}

// asInt returns the integer value of an integer literal that fits in int64.
func (v *jsonValue) asInt() (int64, bool) {
	if v == nil || v.kind != jInt {
		return 0, false
	}
	n, err := strconv.ParseInt(v.num, 10, 64)
	return n, err == nil
}

var errJSON = errors.New("invalid JSON")

type jsonParser struct {
	s     []byte
	i     int
	depth int
}

func parseJSON(data []byte) (*jsonValue, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("not UTF-8")
	}
	p := &jsonParser{s: data}
	p.ws()
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(p.s) {
		return nil, errors.New("extra data after JSON value")
	}
	return v, nil
}

func (p *jsonParser) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) lit(word string) bool {
	if bytes.HasPrefix(p.s[p.i:], []byte(word)) {
		p.i += len(word)
		return true
	}
	return false
}

func (p *jsonParser) value() (*jsonValue, error) {
	if p.i >= len(p.s) {
		return nil, errJSON
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		p.i++
		u, err := p.str()
		if err != nil {
			return nil, err
		}
		return &jsonValue{kind: jString, str: u}, nil
	case p.lit("null"):
		return &jsonValue{kind: jNull}, nil
	case p.lit("true"):
		return &jsonValue{kind: jBool, b: true}, nil
	case p.lit("false"):
		return &jsonValue{kind: jBool}, nil
	case p.lit("NaN"):
		return &jsonValue{kind: jFloat, f: math.NaN()}, nil
	case p.lit("Infinity"):
		return &jsonValue{kind: jFloat, f: math.Inf(1)}, nil
	case p.lit("-Infinity"):
		return &jsonValue{kind: jFloat, f: math.Inf(-1)}, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	}
	return nil, errJSON
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (p *jsonParser) number() (*jsonValue, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	if p.i >= len(p.s) || !isDigit(p.s[p.i]) {
		return nil, errJSON
	}
	if p.s[p.i] == '0' {
		p.i++
	} else {
		for p.i < len(p.s) && isDigit(p.s[p.i]) {
			p.i++
		}
	}
	intEnd := p.i
	isFloat := false
	if p.i+1 < len(p.s) && p.s[p.i] == '.' && isDigit(p.s[p.i+1]) {
		isFloat = true
		p.i++
		for p.i < len(p.s) && isDigit(p.s[p.i]) {
			p.i++
		}
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		j := p.i + 1
		if j < len(p.s) && (p.s[j] == '+' || p.s[j] == '-') {
			j++
		}
		if j < len(p.s) && isDigit(p.s[j]) {
			isFloat = true
			for j < len(p.s) && isDigit(p.s[j]) {
				j++
			}
			p.i = j
		}
	}
	text := string(p.s[start:p.i])
	if !isFloat {
		lit := string(p.s[start:intEnd])
		if lit == "-0" {
			lit = "0"
		}
		return &jsonValue{kind: jInt, num: lit}, nil
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, errJSON
	}
	return &jsonValue{kind: jFloat, f: f}, nil
}

func hex4(b []byte) (uint16, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var n uint16
	for _, c := range b[:4] {
		n <<= 4
		switch {
		case c >= '0' && c <= '9':
			n |= uint16(c - '0')
		case c >= 'a' && c <= 'f':
			n |= uint16(c-'a') + 10
		case c >= 'A' && c <= 'F':
			n |= uint16(c-'A') + 10
		default:
			return 0, false
		}
	}
	return n, true
}

// str reads a string body after the opening quote, as UTF-16 code units.
func (p *jsonParser) str() ([]uint16, error) {
	var out []uint16
	for {
		if p.i >= len(p.s) {
			return nil, errJSON
		}
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return out, nil
		case c < 0x20:
			return nil, errJSON
		case c == '\\':
			if p.i+1 >= len(p.s) {
				return nil, errJSON
			}
			e := p.s[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, uint16(e))
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				u, ok := hex4(p.s[p.i:])
				if !ok {
					return nil, errJSON
				}
				p.i += 4
				out = append(out, u)
			default:
				return nil, errJSON
			}
		default:
			r, size := utf8.DecodeRune(p.s[p.i:])
			p.i += size
			out = append(out, utf16.Encode([]rune{r})...)
		}
	}
}

func (p *jsonParser) enter() error {
	p.depth++
	if p.depth > maxJSONDepth {
		return errors.New("JSON nested too deeply")
	}
	return nil
}

func (p *jsonParser) array() (*jsonValue, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	p.i++
	v := &jsonValue{kind: jArray, arr: []*jsonValue{}}
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == ']' {
		p.i++
		return v, nil
	}
	for {
		p.ws()
		item, err := p.value()
		if err != nil {
			return nil, err
		}
		v.arr = append(v.arr, item)
		p.ws()
		if p.i >= len(p.s) {
			return nil, errJSON
		}
		if p.s[p.i] == ',' {
			p.i++
			continue
		}
		if p.s[p.i] == ']' {
			p.i++
			return v, nil
		}
		return nil, errJSON
	}
}

func (p *jsonParser) object() (*jsonValue, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	p.i++
	v := &jsonValue{kind: jObject, index: map[string]int{}}
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return v, nil
	}
	for {
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			return nil, errJSON
		}
		p.i++
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return nil, errJSON
		}
		p.i++
		p.ws()
		item, err := p.value()
		if err != nil {
			return nil, err
		}
		ks := string(utf16.Decode(k))
		if j, dup := v.index[ks]; dup && utf16Equal(v.keys[j], k) {
			v.vals[j] = item
		} else {
			v.index[ks] = len(v.keys)
			v.keys = append(v.keys, k)
			v.vals = append(v.vals, item)
		}
		p.ws()
		if p.i >= len(p.s) {
			return nil, errJSON
		}
		if p.s[p.i] == ',' {
			p.i++
			continue
		}
		if p.s[p.i] == '}' {
			p.i++
			return v, nil
		}
		return nil, errJSON
	}
}

func utf16Equal(a, b []uint16) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// without returns a copy of object v without key (shallow).
func (v *jsonValue) without(key string) *jsonValue {
	out := &jsonValue{kind: jObject, index: map[string]int{}}
	for i, k := range v.keys {
		ks := string(utf16.Decode(k))
		if ks == key && utf16Equal(k, utf16.Encode([]rune(key))) {
			continue
		}
		out.index[ks] = len(out.keys)
		out.keys = append(out.keys, k)
		out.vals = append(out.vals, v.vals[i])
	}
	return out
}

// ---------------------------------------------------------------- Python json.dumps

// pyFloatRepr formats a float as Python's repr does.
func pyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	neg := strings.HasPrefix(e, "-")
	e = strings.TrimPrefix(e, "-")
	mant, expText, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expText)
	digits := strings.Replace(mant, ".", "", 1)
	var out string
	if exp >= -4 && exp < 16 {
		if exp >= 0 {
			if len(digits) <= exp+1 {
				out = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
			} else {
				out = digits[:exp+1] + "." + digits[exp+1:]
			}
		} else {
			out = "0." + strings.Repeat("0", -exp-1) + digits
		}
	} else {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign = "-"
			exp = -exp
		}
		es := strconv.Itoa(exp)
		if len(es) < 2 {
			es = "0" + es
		}
		out = m + "e" + sign + es
	}
	if neg {
		return "-" + out
	}
	return out
}

const hexLower = "0123456789abcdef"

func pyDumpString(b *strings.Builder, u []uint16) {
	b.WriteByte('"')
	for _, c := range u {
		switch {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\f':
			b.WriteString(`\f`)
		case c >= 0x20 && c <= 0x7e:
			b.WriteByte(byte(c))
		default:
			b.WriteString(`\u`)
			b.WriteByte(hexLower[c>>12&15])
			b.WriteByte(hexLower[c>>8&15])
			b.WriteByte(hexLower[c>>4&15])
			b.WriteByte(hexLower[c&15])
		}
	}
	b.WriteByte('"')
}

// pyDumps serialises v as Python's json.dumps(v) with default arguments.
func pyDumps(v *jsonValue) string {
	var b strings.Builder
	pyDump(&b, v)
	return b.String()
}

func pyDump(b *strings.Builder, v *jsonValue) {
	switch v.kind {
	case jNull:
		b.WriteString("null")
	case jBool:
		if v.b {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case jInt:
		b.WriteString(v.num)
	case jFloat:
		b.WriteString(pyFloatRepr(v.f))
	case jString:
		pyDumpString(b, v.str)
	case jArray:
		b.WriteByte('[')
		for i, item := range v.arr {
			if i > 0 {
				b.WriteString(", ")
			}
			pyDump(b, item)
		}
		b.WriteByte(']')
	case jObject:
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			pyDumpString(b, k)
			b.WriteString(": ")
			pyDump(b, v.vals[i])
		}
		b.WriteByte('}')
	}
}

// ---------------------------------------------------------------- canonical JSON (RFC 8785)

const maxSafeInt = 1<<53 - 1

var errNotCanonicalisable = errors.New("value cannot be written as canonical JSON")

// canonicalJSON writes v as RFC 8785 JSON for the values the extended format uses: objects
// with ASCII keys, arrays, strings, booleans, null and integers of magnitude below 2^53.
// Floats, other keys and nesting deeper than 16 are refused.
func canonicalJSON(v *jsonValue) ([]byte, error) {
	var b strings.Builder
	if err := canonWrite(&b, v, 0); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

func canonString(b *strings.Builder, u []uint16) error {
	b.WriteByte('"')
	for i := 0; i < len(u); i++ {
		c := u[i]
		switch {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\f':
			b.WriteString(`\f`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hexLower[c>>4])
			b.WriteByte(hexLower[c&15])
		case utf16.IsSurrogate(rune(c)):
			if c < 0xdc00 && i+1 < len(u) && u[i+1] >= 0xdc00 && u[i+1] <= 0xdfff {
				b.WriteRune(utf16.DecodeRune(rune(c), rune(u[i+1])))
				i++
				continue
			}
			return errNotCanonicalisable // a lone surrogate has no UTF-8 form
		default:
			b.WriteRune(rune(c))
		}
	}
	b.WriteByte('"')
	return nil
}

func canonWrite(b *strings.Builder, v *jsonValue, depth int) error {
	if depth > 16 {
		return errNotCanonicalisable
	}
	switch v.kind {
	case jNull:
		b.WriteString("null")
	case jBool:
		if v.b {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case jInt:
		n, ok := v.asInt()
		if !ok || n > maxSafeInt || n < -maxSafeInt {
			return errNotCanonicalisable
		}
		b.WriteString(strconv.FormatInt(n, 10))
	case jFloat:
		return errNotCanonicalisable
	case jString:
		return canonString(b, v.str)
	case jArray:
		b.WriteByte('[')
		for i, item := range v.arr {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := canonWrite(b, item, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case jObject:
		order := make([]int, len(v.keys))
		for i, k := range v.keys {
			for _, c := range k {
				if c > 0x7f {
					return errNotCanonicalisable
				}
			}
			order[i] = i
		}
		sort.Slice(order, func(x, y int) bool {
			return lessUTF16(v.keys[order[x]], v.keys[order[y]])
		})
		b.WriteByte('{')
		for n, i := range order {
			if n > 0 {
				b.WriteByte(',')
			}
			if err := canonString(b, v.keys[i]); err != nil {
				return err
			}
			b.WriteByte(':')
			if err := canonWrite(b, v.vals[i], depth+1); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	}
	return nil
}

func lessUTF16(a, b []uint16) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

func utf16Decode(u []uint16) string { return string(utf16.Decode(u)) }
