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

func FuzzSignedList(f *testing.F) {
	for _, s := range []string{`{"fingerprintList": [], "signature": "AA=="}`, `[[[[]]]]`,
		`{"fingerprintList": [{"fingerprint": "\ud800"}], "signature": "AA=="}`, `-0`, `1e999`} {
		f.Add([]byte(s))
	}
	key := &testKey(f, 0).PublicKey
	f.Fuzz(func(t *testing.T, raw []byte) {
		if _, err := VerifySignedList(raw, key, MaxResponseBytes); err == nil {
			t.Fatal("a body verified that nobody signed")
		} else if k := ErrorKind(err); k != KindResponse && k != KindSignature {
			t.Fatalf("failure of kind %q: %v", k, err)
		}
		// whatever the bytes, the parse of S fails cleanly or yields a bounded list
		if entries, err := parseSignedBytes(raw); err == nil && len(entries) > maxHistoryEntries {
			t.Fatalf("%d entries", len(entries))
		} else if err != nil && ErrorKind(err) != KindResponse {
			t.Fatalf("failure of kind %q: %v", ErrorKind(err), err)
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
