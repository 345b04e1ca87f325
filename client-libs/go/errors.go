// Package converge asks Convergence notaries whether the certificate a client was shown for
// host:port is the one they see from their own network paths.
//
// It behaves exactly like the Python reference client (client-libs/python): the same
// configuration directory and .notary bundles, the SQLite cache of the 2011 add-on, the
// same vote rules and consensus policies with stand-aside, and the legacy Convergence v1
// wire format (docs/wire-format.md), plus verification of the extended converge-answer/1
// format.
package converge

import (
	"errors"
	"fmt"
)

// Family tells the two error families apart.
type Family int

const (
	// BadInput: the data is wrong (a fingerprint, target, bundle, configuration, response).
	// Retrying does not help.
	BadInput Family = iota
	// IOFailure: an IO step failed (connection, TLS, pin, timeout, the cache database).
	IOFailure
)

// Error kinds shared with the other languages' libraries and the test vectors.
const (
	KindFingerprint = "fingerprint"
	KindTarget      = "target"
	KindResponse    = "response"
	KindSignature   = "signature"
	KindBundle      = "bundle"
	KindConfig      = "config"
	KindUnreachable = "unreachable"
	KindPin         = "pin"
	KindCacheIO     = "cache-io"
	KindTimeout     = "timeout"
)

// Error is every error this package returns. Kind is a stable word (see the Kind constants).
type Error struct {
	Kind    string
	Family  Family
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("converge: %s: %s: %v", e.Kind, e.Message, e.Err)
	}
	return fmt.Sprintf("converge: %s: %s", e.Kind, e.Message)
}

// Version of the Go client.
const Version = "0.1.0"

func (e *Error) Unwrap() error { return e.Err }

func badInput(kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Family: BadInput, Message: fmt.Sprintf(format, args...)}
}

func ioFailure(kind string, err error, format string, args ...any) *Error {
	return &Error{Kind: kind, Family: IOFailure, Message: fmt.Sprintf(format, args...), Err: err}
}

// ErrorKind returns the Kind of err when it is (or wraps) an *Error, else "".
func ErrorKind(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}
