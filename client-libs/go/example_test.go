package converge_test

import (
	"fmt"

	converge "github.com/converge-notary/converge/client-libs/go"
)

func ExampleParseFingerprint() {
	fp, err := converge.ParseFingerprint("8fc079e814777f688ba4c807d9bd67d62af71aeb")
	if err != nil {
		panic(err)
	}
	fmt.Println(fp.Algorithm, fp)
	_, err = converge.ParseFingerprint("8F-C0-79")
	fmt.Println(converge.ErrorKind(err))
	// Output:
	// sha1 8F:C0:79:E8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2A:F7:1A:EB
	// fingerprint
}

func ExampleSettled() {
	// majority of three, stand-aside on: two successes settle it, the third need not answer
	votes := []converge.Vote{converge.VoteSuccess, converge.VoteSuccess}
	trusted, settled, _ := converge.Settled(converge.Majority, votes, 1, true)
	fmt.Println(trusted, settled)
	// consensus: the third could still fail
	_, settled, _ = converge.Settled(converge.Consensus, votes, 1, true)
	fmt.Println(settled)
	// Output:
	// true true
	// false
}

func ExampleRequestBytes() {
	fp, _ := converge.ParseFingerprint("8F:C0:79:E8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2A:F7:1A:EB")
	req, _ := converge.RequestBytes("WWW.Example.org", 443, fp, "")
	fmt.Printf("%q\n", req)
	// Output:
	// "POST /target/www.example.org+443 HTTP/1.0\r\nContent-Type: application/x-www-form-urlencoded\r\nConnection: close\r\nContent-Length: 71\r\n\r\nfingerprint=8F:C0:79:E8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2A:F7:1A:EB"
}
