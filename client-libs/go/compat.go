package converge

import (
	"bytes"
	"context"
	"crypto/sha1"
	"sync"
)

// The module builds with Go 1.19 (Debian 12's golang-go), so these stand in for newer
// standard-library helpers.

// afterFunc runs f when ctx is done, unless stop is called first (context.AfterFunc, Go 1.21):
// stop reports whether it kept f from running (false: f ran or is running, or stop was
// already called).
func afterFunc(ctx context.Context, f func()) (stop func() bool) {
	var mu sync.Mutex
	pending := true
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			mu.Lock()
			run := pending
			pending = false
			mu.Unlock()
			if run {
				f()
			}
		case <-done:
		}
	}()
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		if !pending {
			return false
		}
		pending = false
		close(done)
		return true
	}
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
