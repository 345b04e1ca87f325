package converge

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Kept connections and TLS sessions (IO). An extended query over a direct connection asks
// "Connection: keep-alive" instead of the legacy add-on's "close" (HTTP/1.0 keep-alive); when
// the notary answers "Connection: keep-alive" with exactly one valid Content-Length and no
// Transfer-Encoding, the answer is read to its length and the connection is kept for the
// next extended query to the same host, port and pin. Any doubt about the framing means the
// answer is read to the end and the connection closed, as for a one-request connection.
//
//   - At most MaxIdlePerHost idle connections per host, each for at most IdleTimeout (under
//     a notary's own keep-alive timeout, 15 s by default); a timer closes them after it.
//   - The pin is checked before every request, on a kept connection as on a new one.
//   - A kept connection that ended before the first byte of an answer (EOF, reset, broken
//     pipe: the notary closed it meanwhile) is replaced by a new connection once; on a new
//     connection those cases are what they always were.
//   - Legacy queries (the add-on's exact bytes) and queries through a bounce relay use one
//     connection each. Config.DisableKeepAlives turns kept connections off.
//   - Every new direct connection (either format, kept-alive or not) offers the TLS session
//     of an earlier one to the same host, port and pin.

const (
	// MaxIdlePerHost is the number of idle connections kept per notary host, port and pin.
	MaxIdlePerHost = 4
	// IdleTimeout is how long an idle connection is kept.
	IdleTimeout = 10 * time.Second
	maxPoolKeys = 256
)

type poolKey struct {
	host string
	port int
	pin  string
}

func keyOf(nh NotaryHost) poolKey {
	return poolKey{strings.ToLower(nh.Host), nh.SSLPort, string(nh.Pin.Digest)}
}

// keptConn is a connection whose last answer was read in full, with its reader (nothing
// buffered in it when it is kept).
type keptConn struct {
	conn  *tls.Conn
	br    *bufio.Reader
	since time.Time
	timer *time.Timer
}

// connPool holds a client's idle notary connections and the TLS session caches of direct
// connections, one per host, port and pin (the zero value is empty and ready).
type connPool struct {
	mu      sync.Mutex
	idle    map[poolKey][]*keptConn
	session map[poolKey]tls.ClientSessionCache
}

// sessions is the TLS session cache of direct connections to key. A resumed session carries
// the certificate of its first handshake, so the pin is checked on it as on any other.
func (p *connPool) sessions(key poolKey) tls.ClientSessionCache {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.session == nil || (p.session[key] == nil && len(p.session) >= maxPoolKeys) {
		p.session = map[poolKey]tls.ClientSessionCache{}
	}
	c := p.session[key]
	if c == nil {
		c = tls.NewLRUClientSessionCache(1)
		p.session[key] = c
	}
	return c
}

// take returns the most recent idle connection to key, or nil; the caller owns it.
func (p *connPool) take(key poolKey) *keptConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[key]
	for len(list) > 0 {
		kc := list[len(list)-1]
		list = list[:len(list)-1]
		kc.timer.Stop()
		if time.Since(kc.since) < IdleTimeout {
			p.idle[key] = list
			return kc
		}
		kc.conn.Close()
	}
	delete(p.idle, key)
	return nil
}

// put keeps conn for the next query to key (the oldest idle one beyond MaxIdlePerHost is
// closed).
func (p *connPool) put(key poolKey, conn *tls.Conn, br *bufio.Reader) {
	kc := &keptConn{conn: conn, br: br, since: time.Now()}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle == nil {
		p.idle = map[poolKey][]*keptConn{}
	}
	if _, known := p.idle[key]; !known && len(p.idle) >= maxPoolKeys {
		p.closeLocked()
	}
	list := p.idle[key]
	if len(list) >= MaxIdlePerHost {
		list[0].timer.Stop()
		list[0].conn.Close()
		list = append(list[:0:0], list[1:]...)
	}
	kc.timer = time.AfterFunc(IdleTimeout, func() { p.expire(key, kc) })
	p.idle[key] = append(list, kc)
}

// expire closes kc if it is still idle.
func (p *connPool) expire(key poolKey, kc *keptConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[key]
	for i, x := range list {
		if x == kc {
			kc.conn.Close()
			p.idle[key] = append(list[:i:i], list[i+1:]...)
			if len(p.idle[key]) == 0 {
				delete(p.idle, key)
			}
			return
		}
	}
}

// close closes every idle connection.
func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeLocked()
}

func (p *connPool) closeLocked() {
	for _, list := range p.idle {
		for _, kc := range list {
			kc.timer.Stop()
			kc.conn.Close()
		}
	}
	p.idle = nil
}

// idleCount is the number of idle connections to key (tests).
func (p *connPool) idleCount(key poolKey) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle[key])
}

// endedBeforeAnswer: err is how a connection the peer closed shows on the next request
// (a clean or unclean EOF, a reset, a broken pipe).
func endedBeforeAnswer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

var endOfHead = []byte("\r\n\r\n")

// readAnswer reads one answer from br: its head, then exactly Content-Length bytes when the
// notary keeps the connection open (reusable), else to the end. Errors and truncations are
// those of readToEOF on the same bytes. started says whether any byte of it arrived.
func readAnswer(br *bufio.Reader, maxBytes int) (raw []byte, reusable, started bool, err error) {
	var head []byte
	for !bytes.HasSuffix(head, endOfHead) {
		line, err := br.ReadSlice('\n')
		head = append(head, line...)
		if len(head) > maxBytes {
			return nil, false, true, responseErr("response larger than %d bytes", maxBytes)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF || (errors.Is(err, io.ErrUnexpectedEOF) && len(head) > 0) {
				return head, false, len(head) > 0, nil // a truncated head: the parser names it
			}
			return nil, false, len(head) > 0, err
		}
	}
	length, keepAlive := framing(head)
	if length < 0 || !keepAlive {
		raw, err := readToEOF(io.MultiReader(bytes.NewReader(head), br), maxBytes)
		return raw, false, true, err
	}
	if len(head)+length > maxBytes {
		return nil, false, true, responseErr("response larger than %d bytes", maxBytes)
	}
	raw = make([]byte, len(head)+length)
	copy(raw, head)
	n, err := io.ReadFull(br, raw[len(head):])
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return raw[:len(head)+n], false, true, nil // a truncated body: the parser names it
	}
	if err != nil {
		return nil, false, true, err
	}
	// bytes past the answer would be read as the next one's: not kept
	return raw, br.Buffered() == 0, true, nil
}

// framing is the Content-Length of a response head (-1: none, or in doubt: two of them, a
// bad value, a transfer coding) and whether the notary keeps the connection open (pure).
func framing(head []byte) (length int, keepAlive bool) {
	length = -1
	lines := strings.Split(latin1(head), "\r\n")
	for _, line := range lines[1:] {
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimSpace(value)
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "content-length":
			if length >= 0 || !allDigits(value) || len(value) > 12 {
				return -1, false
			}
			length, _ = strconv.Atoi(value)
		case "connection":
			keepAlive = strings.EqualFold(value, "keep-alive")
		case "transfer-encoding":
			return -1, false
		}
	}
	return length, keepAlive
}
