package converge

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// One hostile notary among honest ones (issue 31): a genuine notary and one that answers
// each hostile form. Every check returns a verdict; the genuine notary's vote is intact; the
// hostile one gets the vote the contract names (its twin, the same notary answering within
// the bounds, gets the other vote).

const otherFP = "00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33"

func nested(levels int) string { // `levels` open brackets below the top-level object
	return strings.Repeat("[", levels) + strings.Repeat("]", levels)
}

// signedList is the body of a legacy answer whose signed bytes are S.
func signedList(s string, sign func(string) string) string {
	return s[:len(s)-1] + `, "signature": "` + sign(s) + `"}`
}

func listOf(members string, fp string) string {
	return `{` + members + `"fingerprintList": [` + legacyEntry(fp) + `]}`
}

type hostileForm struct {
	name string
	body func(seen string, sign func(string) string) string
	want string // the hostile notary's vote/kind
}

var legacyHostileForms = []hostileForm{
	{"genuine", func(g string, sign func(string) string) string { return signedList(listOf("", g), sign) }, "success/listed"},
	{"list spliced after the signature", func(g string, sign func(string) string) string {
		return strings.TrimSuffix(signedList(listOf("", otherFP), sign), "}") + `, "fingerprintList": [` + legacyEntry(g) + `]}`
	}, "failure/response"},
	{"member after the signature", func(g string, sign func(string) string) string {
		return strings.TrimSuffix(signedList(listOf("", g), sign), "}") + `, "x": 1}`
	}, "failure/response"},
	{"byte after the brace", func(g string, sign func(string) string) string { return signedList(listOf("", g), sign) + "\n" }, "failure/response"},
	{"malformed JSON after the signature", func(g string, sign func(string) string) string {
		return strings.TrimSuffix(signedList(listOf("", g), sign), `"}`) + `", ]}`
	}, "failure/response"},
	{"second signature member", func(g string, sign func(string) string) string {
		s := listOf("", g)
		return s[:len(s)-1] + `, "signature": "` + sign(s) + `", "signature": "` + sign(s) + `"}`
	}, "failure/signature"},
	{"signature over other bytes", func(g string, sign func(string) string) string {
		s := listOf("", g)
		return s[:len(s)-1] + `, "signature": "` + sign(s+" ") + `"}`
	}, "failure/signature"},
	{"repeated list, the last counts", func(g string, sign func(string) string) string {
		return signedList(`{"fingerprintList": [`+legacyEntry(otherFP)+`], "fingerprintList": [`+legacyEntry(g)+`]}`, sign)
	}, "success/listed"},
	{"repeated list, the last counts (twin)", func(g string, sign func(string) string) string {
		return signedList(`{"fingerprintList": [`+legacyEntry(g)+`], "fingerprintList": [`+legacyEntry(otherFP)+`]}`, sign)
	}, "failure/not-listed"},
	{"15-digit integer", func(g string, sign func(string) string) string {
		return signedList(listOf(`"x": `+strings.Repeat("9", 15)+`, `, g), sign)
	}, "success/listed"},
	{"16-digit integer", func(g string, sign func(string) string) string {
		return signedList(listOf(`"x": `+strings.Repeat("9", 16)+`, `, g), sign)
	}, "failure/response"},
	{"5000-digit integer", func(g string, sign func(string) string) string {
		return signedList(listOf(`"x": `+strings.Repeat("7", 5000)+`, `, g), sign)
	}, "failure/response"},
	{"32 levels", func(g string, sign func(string) string) string {
		return signedList(listOf(`"x": `+nested(31)+`, `, g), sign)
	}, "success/listed"},
	{"33 levels", func(g string, sign func(string) string) string {
		return signedList(listOf(`"x": `+nested(32)+`, `, g), sign)
	}, "failure/response"},
	{"number key", func(g string, sign func(string) string) string { return signedList(listOf(`1.5: 1, `, g), sign) }, "failure/response"},
	{"NaN", func(g string, sign func(string) string) string { return signedList(listOf(`"x": NaN, `, g), sign) }, "failure/response"},
	{"lone surrogate in the fingerprint", func(g string, sign func(string) string) string {
		return signedList(listOf("", `\ud800`+g[6:]), sign)
	}, "failure/response"},
	{"invalid UTF-8", func(g string, sign func(string) string) string {
		return signedList(listOf("\"x\": \"\xff\", ", g), sign)
	}, "failure/response"},
	{"comment", func(g string, sign func(string) string) string { return signedList(listOf(`/* */ `, g), sign) }, "failure/response"},
}

func votesByNotary(t *testing.T, v Verdict) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range v.Results {
		out[r.Name] = string(r.Vote) + "/" + r.Kind
	}
	return out
}

func TestHostileLegacyNotaryAmongHonest(t *testing.T) {
	w := newWorld(t, 2, false)
	for _, f := range legacyHostileForms {
		w.notaries[1].answerWith(f.body, nil, nil)
		c := w.client(t, map[string]any{"notary-agreement": "majority"})
		v, err := c.Check(context.Background(), "127.0.0.1", w.targetPort, FingerprintOf(w.genuine.der, "sha1").ColonHex())
		if err != nil {
			t.Fatalf("%s: no verdict: %v", f.name, err)
		}
		got := votesByNotary(t, v)
		if got["Org A"] != "success/listed" || got["Org B"] != f.want {
			t.Errorf("%s: votes %v, want Org B %s", f.name, got, f.want)
		}
		c.Close()
	}
}

type stmtForm struct {
	name         string
	stmt, answer func(string) string
	want         string
}

func member(m string) func(string) string {
	return func(stmt string) string { return "{" + m + "," + stmt[1:] }
}

var extendedHostileForms = []stmtForm{
	{"genuine", nil, nil, "success/match"},
	{"repeated verdict, the last counts", member(`"verdict":"mismatch"`), nil, "success/match"},
	{"repeated verdict, the last counts (twin)", func(s string) string { return s[:len(s)-1] + `,"verdict":"mismatch"}` }, nil, "failure/response"},
	{"15-digit integer", member(`"x":` + strings.Repeat("9", 15)), nil, "success/match"},
	{"5000-digit integer", member(`"x":` + strings.Repeat("7", 5000)), nil, "failure/malformed"},
	{"32 levels", member(`"x":` + nested(31)), nil, "success/match"},
	{"33 levels", member(`"x":` + nested(32)), nil, "failure/malformed"},
	{"number key", member(`1:1`), nil, "failure/malformed"},
	{"NaN", member(`"x":NaN`), nil, "failure/malformed"},
	{"invalid UTF-8", member("\"x\":\"\xff\""), nil, "failure/malformed"},
	{"member after the statement", nil, func(a string) string { return a[:len(a)-1] + `,"x":1}` }, "failure/bad-signature"},
	{"byte after the brace", nil, func(a string) string { return a + "\n" }, "failure/malformed"},
	{"unknown key id", nil, func(a string) string { return strings.Replace(a, `"key_id":"`, `"key_id":"0`, 1) }, "failure/unknown-key"},
	{"reordered prefix", nil, func(a string) string {
		return strings.Replace(a, `{"signature":{"alg":"ed25519",`, `{"signature":{ "alg":"ed25519",`, 1)
	}, "failure/malformed"},
}

func TestHostileExtendedNotaryAmongHonest(t *testing.T) {
	w := newWorld(t, 2, true)
	for _, f := range extendedHostileForms {
		w.notaries[1].answerWith(nil, f.stmt, f.answer)
		c := w.client(t, map[string]any{"notary-agreement": "majority", "extended": "require"})
		v, err := c.Check(context.Background(), "127.0.0.1", w.targetPort, FingerprintOf(w.genuine.der, "sha1").ColonHex())
		if err != nil {
			t.Fatalf("%s: no verdict: %v", f.name, err)
		}
		got := votesByNotary(t, v)
		if got["Org A"] != "success/match" || got["Org B"] != f.want {
			t.Errorf("%s: votes %v, want Org B %s", f.name, got, f.want)
		}
		c.Close()
	}
}

// A socket error during a check is a refused connection or an unreachable notary, never a
// panic: the site resets the connection while the notaries are being asked, and a notary
// resets its connection after reading the request.
func TestResetDuringTheCheckIsARefusal(t *testing.T) {
	w := newWorld(t, 2, false)
	w.notaries[0].delay = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	for _, n := range w.notaries {
		n.sees(fmt.Sprintf("127.0.0.1:%d", port), w.genuine.der)
	}
	var resetting atomic.Bool
	go func() {
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			go func(raw net.Conn) {
				conn := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{w.genuine.cert}})
				if resetting.Load() {
					go conn.Handshake()
					time.Sleep(100 * time.Millisecond) // the client is asking the notaries now
					resetConn(raw)
					return
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := bufio.NewReader(conn).ReadString('\n'); err == nil {
					conn.Write([]byte("HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"))
				}
			}(raw)
		}
	}()
	c := w.client(t, map[string]any{"cache-lifetime": 0})
	url := fmt.Sprintf("https://127.0.0.1:%d/", port)
	get := func() error {
		hc := &http.Client{Transport: c.Transport(nil, TLSOptions{}), Timeout: 10 * time.Second}
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(); err != nil { // twin: the same site without the reset
		t.Fatalf("genuine site refused: %v", err)
	}
	resetting.Store(true)
	if err := get(); err == nil {
		t.Fatal("a connection reset during the check carried a request")
	}
	resetting.Store(false)
	w.notaries[1].mu.Lock()
	w.notaries[1].reset = true
	w.notaries[1].mu.Unlock()
	v, err := c.Check(context.Background(), "127.0.0.1", port, FingerprintOf(w.genuine.der, "sha1").ColonHex())
	if got := votesByNotary(t, v); err != nil || got["Org A"] != "success/listed" || !strings.HasPrefix(got["Org B"], "unreachable/") {
		t.Fatalf("a notary's reset: %v %v", got, err)
	}
}
