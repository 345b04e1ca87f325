package converge

import (
	"bytes"
	"context"
	"crypto/sha1"
)

// The module builds with Go 1.19 (Debian 12's golang-go), so these stand in for newer
// standard-library helpers.

// afterFunc runs f when ctx is done, unless stop is called first (context.AfterFunc, Go 1.21).
func afterFunc(ctx context.Context, f func()) (stop func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			f()
		case <-done:
		}
	}()
	return func() { close(done) }
}

func minInt(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// pinMatches: the SHA-1 of der is the pinned digest.
func pinMatches(der, digest []byte) bool {
	sum := sha1.Sum(der)
	return bytes.Equal(sum[:], digest)
}
