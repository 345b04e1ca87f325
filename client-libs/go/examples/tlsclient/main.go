// Command tlsclient fetches an HTTPS URL, trusting the server's certificate only when the
// configured notaries see the same one (no CA validation).
//
//	go run ./examples/tlsclient [-config DIR] [-require-ca] https://www.example.org/
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	converge "github.com/converge-notary/converge/client-libs/go"
)

func main() {
	dir := flag.String("config", "", "configuration directory (default: discovered)")
	requireCA := flag.Bool("require-ca", false, "also demand ordinary CA validation")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: tlsclient [-config DIR] [-require-ca] URL")
		os.Exit(2)
	}
	client, err := converge.NewClient(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer client.Close()

	// The only change to an ordinary Go HTTPS client: its transport. Proxies from the
	// environment (HTTPS_PROXY) are honoured; the origin's certificate is what is checked.
	base := &http.Transport{Proxy: http.ProxyFromEnvironment}
	tr := client.Transport(base, converge.TLSOptions{RequireCA: *requireCA})
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	resp, err := hc.Get(flag.Arg(0))
	if err != nil {
		var nt *converge.NotTrustedError
		if errors.As(err, &nt) && nt.Verdict != nil {
			for _, r := range nt.Verdict.Results {
				fmt.Fprintf(os.Stderr, "  %-20s %-12s %s\n", r.Name, r.Vote, r.Kind)
			}
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	n, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	fmt.Printf("%s: %s, %d bytes, certificate confirmed by the notaries\n", flag.Arg(0), resp.Status, n)
}
