package converge

// Reading JSON: encoding/json, strictly (one RFC 8259 text, UTF-8, numbers kept as written),
// and the bounds scan that every client runs over verified bytes before parsing them
// (docs/wire-format.md, "The bounds scan").

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"unicode/utf8"
)

const (
	maxJSONDepth = 32
	maxSafeInt   = 1<<53 - 1
)

var (
	intTokenRE   = regexp.MustCompile(`^-?(0|[1-9][0-9]{0,14})$`)
	errTooDeep   = errors.New("JSON nested more than 32 levels")
	errBadNumber = errors.New("a number that is not an integer of at most 15 digits")
)

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isNumberByte(c byte) bool {
	return isDigit(c) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// boundsScan checks, outside strings, that at most 32 levels are open at once and that every
// number token is -?(0|[1-9][0-9]{0,14}). Everything else is left to the parser.
func boundsScan(b []byte) error {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case c == '[' || c == '{':
			if depth++; depth > maxJSONDepth {
				return errTooDeep
			}
		case c == ']' || c == '}':
			depth--
		case c == '-' || isDigit(c):
			j := i
			for j < len(b) && isNumberByte(b[j]) {
				j++
			}
			if !intTokenRE.Match(b[i:j]) {
				return errBadNumber
			}
			i = j - 1
		}
	}
	return nil
}

// decodeJSON parses exactly one JSON text (white space around it only) with encoding/json:
// objects become map[string]any (the last of repeated member names counts), numbers
// json.Number. Invalid UTF-8 is refused (encoding/json would replace it).
func decodeJSON(b []byte) (any, error) {
	if !utf8.Valid(b) {
		return nil, errors.New("not UTF-8")
	}
	if !json.Valid(b) {
		return nil, errors.New("not one JSON text")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// decodeObject is decodeJSON for a text that must be an object.
func decodeObject(b []byte) (map[string]any, error) {
	v, err := decodeJSON(b)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	return obj, nil
}

func jObject(v any) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	return m, ok
}

func jArray(v any) ([]any, bool) {
	a, ok := v.([]any)
	return a, ok
}

func jString(v any) (string, bool) {
	s, ok := v.(string)
	return s, ok
}

// jInt: a number written as an integer (no fraction or exponent) that fits an int64.
func jInt(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	return i, err == nil
}

// jFloat: any number.
func jFloat(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	return f, err == nil
}
