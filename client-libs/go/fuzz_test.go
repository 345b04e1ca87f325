package converge

import (
	"crypto/ed25519"
	"testing"
)

// Fuzz targets: no input makes the parsers panic or run unbounded. `go test` runs the seeds;
// `go test -fuzz FuzzX` explores further.

func FuzzParseHTTPResponse(f *testing.F) {
	f.Add([]byte("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
	f.Add([]byte("HTTP/1.1 409 X\nTransfer-Encoding: chunked\n\n"))
	f.Add([]byte("HTTP/1.0 200 X\r\nContent-Length: 99999999999999999999\r\n\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		o, _ := OutcomeFromHTTP(raw, []Fingerprint{mustFP("8F:C0:79:E8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2A:F7:1A:EB")}, nil, MaxResponseBytes)
		if o.Vote != VoteSuccess && o.Vote != VoteFailure && o.Vote != VoteUnreachable {
			t.Fatalf("vote %q", o.Vote)
		}
		if o.Vote == VoteSuccess {
			t.Fatal("a response verified without a key")
		}
	})
}

func FuzzJSON(f *testing.F) {
	for _, s := range []string{`{"a": [1, 2.5, "\ud800", null]}`, `[[[[]]]]`, `{"fingerprintList": [], "signature": "AA=="}`, `-0`, `1e999`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := parseJSON(raw)
		if err != nil {
			return
		}
		// re-serialising is stable: dumps(loads(dumps(x))) == dumps(x)
		once := pyDumps(v)
		again, err := parseJSON([]byte(once))
		if err != nil {
			t.Fatalf("own output does not parse: %q", once)
		}
		if pyDumps(again) != once {
			t.Fatalf("not stable: %q", once)
		}
		if c, err := canonicalJSON(v); err == nil {
			w, err := parseJSON(c)
			if err != nil {
				t.Fatalf("canonical output does not parse: %q", c)
			}
			if c2, _ := canonicalJSON(w); string(c2) != string(c) {
				t.Fatalf("canonical form not stable: %q", c)
			}
		}
	})
}

func FuzzVerifyAnswer(f *testing.F) {
	f.Add([]byte(`{"signature":{"alg":"ed25519","key_id":"00","value":"AA"},"statement":{"type":"converge-answer/1","key_id":"00"}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		keys := map[string]ed25519.PublicKey{"00": make(ed25519.PublicKey, 32)}
		if _, err := VerifyAnswer(raw, keys, Expect{}); err == nil {
			t.Fatal("an answer verified against an all-zero key")
		} else if RejectReason(err) == "" {
			t.Fatalf("unnamed failure: %v", err)
		}
	})
}
