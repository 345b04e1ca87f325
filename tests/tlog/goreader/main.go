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
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
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
	case "vectors":
		err = vectors(os.Args[2:])
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

// vectors cross-checks client-libs/vectors/transparency.json (tree, inclusion, consistency and
// checkpoint cases) with golang.org/x/mod/sumdb/tlog and note and torchwood's cosignatures.
func vectors(args []string) error {
	if len(args) != 1 {
		usage()
	}
	data, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	var doc struct {
		Entries []string          `json:"entries"`
		Keys    map[string]string `json:"keys"`
		Seeds   map[string]string `json:"test_key_seeds"`
		Tests   []map[string]any  `json:"tests"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return err
	}
	b64 := func(v any) []byte {
		s, _ := v.(string)
		out, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil
		}
		return out
	}
	hash := func(v any) tlog.Hash {
		var h tlog.Hash
		copy(h[:], b64(v))
		return h
	}
	proofOf := func(v any) ([]tlog.Hash, bool) {
		var p []tlog.Hash
		list, _ := v.([]any)
		for _, x := range list {
			raw := b64(x)
			if len(raw) != tlog.HashSize {
				return nil, false
			}
			var h tlog.Hash
			copy(h[:], raw)
			p = append(p, h)
		}
		return p, true
	}
	num := func(v any) int64 { f, _ := v.(float64); return int64(f) }
	// the tree of every entry, as tlog stores it
	var stored []tlog.Hash
	reader := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = stored[x]
		}
		return out, nil
	})
	roots := map[int64]tlog.Hash{0: tlog.Hash(sha256.Sum256(nil))}
	for i, e := range doc.Entries {
		raw, _ := base64.StdEncoding.DecodeString(e)
		hs, err := tlog.StoredHashes(int64(i), raw, reader)
		if err != nil {
			return err
		}
		stored = append(stored, hs...)
		root, err := tlog.TreeHash(int64(i+1), reader)
		if err != nil {
			return err
		}
		roots[int64(i+1)] = root
	}
	// the keys, rebuilt from the test-only seeds with the ecosystem's own code
	verifiers := map[string]note.Verifier{}
	for name, seed := range doc.Seeds {
		raw, _ := hex.DecodeString(seed)
		priv := ed25519.NewKeyFromSeed(raw)
		vk := doc.Keys[name]
		keyName := vk[:strings.Index(vk, "+")]
		if strings.HasPrefix(name, "witness") {
			s, err := torchwood.NewCosignatureSigner(keyName, priv)
			if err != nil {
				return err
			}
			if s.Verifier().String() != vk {
				return fmt.Errorf("cosignature key %s: torchwood says %s", vk, s.Verifier().String())
			}
			verifiers[vk] = s.Verifier()
		} else {
			vkey, err := note.NewEd25519VerifierKey(keyName, priv.Public().(ed25519.PublicKey))
			if err != nil || vkey != vk {
				return fmt.Errorf("log key %s: note says %s (%v)", vk, vkey, err)
			}
			v, err := note.NewVerifier(vkey)
			if err != nil {
				return err
			}
			verifiers[vk] = v
		}
	}
	checked, bad := 0, 0
	for _, c := range doc.Tests {
		want := c["result"] == "valid"
		var got bool
		switch c["type"] {
		case "tree":
			r := roots[num(c["size"])]
			got = base64.StdEncoding.EncodeToString(r[:]) == c["root"]
		case "inclusion":
			p, ok := proofOf(c["proof"])
			root, leaf := b64(c["root"]), b64(c["leaf"])
			got = ok && len(root) == tlog.HashSize && len(leaf) == tlog.HashSize &&
				tlog.CheckRecord(p, num(c["size"]), hash(c["root"]), num(c["index"]), hash(c["leaf"])) == nil
		case "consistency":
			p, ok := proofOf(c["proof"])
			o, n := num(c["old_size"]), num(c["new_size"])
			if o == 0 {
				continue // tlog proves nothing from the empty tree; nothing to cross-check
			}
			got = ok && tlog.CheckTree(p, n, hash(c["new_root"]), o, hash(c["old_root"])) == nil
		case "checkpoint":
			log := verifiers[c["log"].(string)]
			list := []note.Verifier{log}
			var ws []string
			for _, w := range c["witnesses"].([]any) {
				list = append(list, verifiers[w.(string)])
				ws = append(ws, verifiers[w.(string)].Name())
			}
			text, _ := c["checkpoint"].(string)
			n, err := note.Open([]byte(text), note.VerifierList(list...))
			got = err == nil
			if got {
				seen := map[string]bool{}
				logSigned := false
				for _, s := range n.Sigs {
					if s.Name == log.Name() && s.Hash == log.KeyHash() {
						logSigned = true
					} else {
						seen[s.Name] = true
					}
				}
				ck, err := torchwood.ParseCheckpoint(n.Text)
				got = logSigned && err == nil && ck.Origin == log.Name() &&
					int64(len(seen)) >= num(c["min_cosignatures"])
				if got && want {
					got = ck.N == num(c["size"]) && base64.StdEncoding.EncodeToString(ck.Hash[:]) == c["root"]
				}
			}
		default:
			continue
		}
		checked++
		if got != want {
			bad++
			fmt.Fprintf(os.Stderr, "case %v (%v): Go says valid=%v\n", c["id"], c["comment"], got)
		}
	}
	fmt.Printf("{\"checked\": %d, \"disagree\": %d}\n", checked, bad)
	if bad > 0 {
		return fmt.Errorf("%d cases disagree with the Go implementation", bad)
	}
	return nil
}
