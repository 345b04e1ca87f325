// Command goreader is an independent reader of a converge notary's transparency log, built
// only on the ecosystem's Go code (golang.org/x/mod/sumdb/note and tlog, filippo.io/torchwood),
// the C2SP specs and the log's verifier key. The notary's tests run it to check that what the
// notary serves is a valid tlog-tiles log.
//
//	goreader read -url URL -vkey VKEY [-state FILE]
//	    verifies the checkpoint, proves it consistent with the one kept in FILE (if any),
//	    reads every entry through the tiles, prints one JSON document, saves the checkpoint
//	goreader inclusion -vkey VKEY -answer FILE
//	    checks the transparency member of a /v2/answer body: checkpoint signature and the
//	    entry's inclusion proof
//
// Exit status 0 when every check passed, 1 otherwise (the reason on stderr), 2 for usage.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "read":
		err = read(os.Args[2:])
	case "inclusion":
		err = inclusion(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "goreader:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: goreader read -url URL -vkey VKEY [-state FILE] | inclusion -vkey VKEY -answer FILE")
	os.Exit(2)
}

func openCheckpoint(data []byte, vkey string) (torchwood.Checkpoint, error) {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return torchwood.Checkpoint{}, fmt.Errorf("verifier key: %w", err)
	}
	n, err := note.Open(data, note.VerifierList(v))
	if err != nil {
		return torchwood.Checkpoint{}, fmt.Errorf("checkpoint signature: %w", err)
	}
	c, err := torchwood.ParseCheckpoint(n.Text)
	if err != nil {
		return torchwood.Checkpoint{}, err
	}
	if c.Origin != v.Name() {
		return torchwood.Checkpoint{}, fmt.Errorf("checkpoint origin %q is not the key's name %q", c.Origin, v.Name())
	}
	return c, nil
}

type entryOut struct {
	Index  int64  `json:"index"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
	IP     any    `json:"ip"`
	SHA256 string `json:"sha256"`
}

type readOut struct {
	Size           int64      `json:"size"`
	Root           string     `json:"root"`
	ConsistentFrom int64      `json:"consistent_from"`
	Entries        []entryOut `json:"entries"`
}

func read(args []string) error {
	fs := flag.NewFlagSet("read", flag.ExitOnError)
	url := fs.String("url", "", "the log's prefix (…/log)")
	vkey := fs.String("vkey", "", "the log's verifier key")
	state := fs.String("state", "", "file keeping the last verified checkpoint")
	fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(strings.TrimSuffix(*url, "/") + "/checkpoint")
	if err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("checkpoint: HTTP %d", resp.StatusCode)
	}
	c, err := openCheckpoint(data, *vkey)
	if err != nil {
		return err
	}
	fetcher, err := torchwood.NewTileFetcher(*url)
	if err != nil {
		return err
	}
	out := readOut{Size: c.N, Root: base64.StdEncoding.EncodeToString(c.Hash[:]), Entries: []entryOut{}}
	if *state != "" {
		if old, err := os.ReadFile(*state); err == nil {
			prev, err := openCheckpoint(old, *vkey)
			if err != nil {
				return fmt.Errorf("kept checkpoint: %w", err)
			}
			if prev.N > c.N {
				return fmt.Errorf("the log shrank from %d to %d entries", prev.N, c.N)
			}
			hr := torchwood.TileHashReaderWithContext(ctx, c.Tree, fetcher)
			proof, err := tlog.ProveTree(c.N, prev.N, hr)
			if err != nil {
				return fmt.Errorf("consistency proof from %d: %w", prev.N, err)
			}
			if err := tlog.CheckTree(proof, c.N, c.Hash, prev.N, prev.Hash); err != nil {
				return fmt.Errorf("checkpoint %d is not consistent with %d: %w", c.N, prev.N, err)
			}
			out.ConsistentFrom = prev.N
		}
	}
	client, err := torchwood.NewClient(fetcher)
	if err != nil {
		return err
	}
	next := int64(0)
	for next < c.N {
		before := next
		for i, e := range client.Entries(ctx, c.Tree, next) {
			if i != next {
				return fmt.Errorf("entry %d came when %d was expected", i, next)
			}
			var doc map[string]any
			if err := json.Unmarshal(e, &doc); err != nil {
				return fmt.Errorf("entry %d is not JSON: %w", i, err)
			}
			port, _ := doc["port"].(float64)
			host, _ := doc["host"].(string)
			sha, _ := doc["sha256"].(string)
			out.Entries = append(out.Entries, entryOut{i, host, int(port), doc["ip"], sha})
			next++
		}
		if err := client.Err(); err != nil {
			return fmt.Errorf("reading entries: %w", err)
		}
		if next == before {
			return errors.New("no progress reading entries")
		}
	}
	if *state != "" {
		if err := os.WriteFile(*state, data, 0o644); err != nil {
			return err
		}
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

func inclusion(args []string) error {
	fs := flag.NewFlagSet("inclusion", flag.ExitOnError)
	vkey := fs.String("vkey", "", "the log's verifier key")
	answer := fs.String("answer", "", "a /v2/answer body")
	fs.Parse(args)
	data, err := os.ReadFile(*answer)
	if err != nil {
		return err
	}
	var doc struct {
		Transparency *struct {
			Checkpoint string   `json:"checkpoint"`
			Entry      string   `json:"entry"`
			Index      int64    `json:"index"`
			Proof      []string `json:"proof"`
		} `json:"transparency"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return err
	}
	t := doc.Transparency
	if t == nil {
		return errors.New("the answer carries no transparency member")
	}
	c, err := openCheckpoint([]byte(t.Checkpoint), *vkey)
	if err != nil {
		return err
	}
	entry, err := base64.StdEncoding.DecodeString(t.Entry)
	if err != nil {
		return err
	}
	var proof tlog.RecordProof
	for _, p := range t.Proof {
		h, err := base64.StdEncoding.DecodeString(p)
		if err != nil || len(h) != tlog.HashSize {
			return errors.New("proof hash is not 32 bytes of base64")
		}
		var hh tlog.Hash
		copy(hh[:], h)
		proof = append(proof, hh)
	}
	if err := tlog.CheckRecord(proof, c.N, c.Hash, t.Index, tlog.RecordHash(entry)); err != nil {
		return fmt.Errorf("inclusion proof: %w", err)
	}
	fmt.Printf("{\"index\": %d, \"size\": %d, \"entry\": %s}\n", t.Index, c.N, entry)
	return nil
}
