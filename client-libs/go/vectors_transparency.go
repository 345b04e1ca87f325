package converge

// converge-vectors/transparency/1 (client-libs/vectors/transparency.json) through
// golang.org/x/mod/sumdb/tlog and this library's checkpoint and member checks.

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

func vHashes(c map[string]any, name string) ([]tlog.Hash, error) {
	var list []any
	switch x := c[name].(type) {
	case []any:
		list = x
	case string:
		list = []any{x}
	default:
		return nil, fmt.Errorf("case has no %s", name)
	}
	out := make([]tlog.Hash, len(list))
	for i, v := range list {
		s, _ := v.(string)
		h, err := strictB64(s)
		if err != nil || len(h) != tlog.HashSize {
			return nil, errors.New("not a 32-byte hash")
		}
		copy(out[i][:], h)
	}
	return out, nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// storedReader reads tlog's stored hashes from *stored (a tree kept in memory).
func storedReader(stored *[]tlog.Hash) tlog.HashReaderFunc {
	return func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = (*stored)[x]
		}
		return out, nil
	}
}

// vectorTreeHash is the RFC 6962 root of entries, through tlog's stored hashes.
func vectorTreeHash(entries [][]byte) (tlog.Hash, error) {
	var stored []tlog.Hash
	reader := storedReader(&stored)
	for i, e := range entries {
		hs, err := tlog.StoredHashes(int64(i), e, reader)
		if err != nil {
			return tlog.Hash{}, err
		}
		stored = append(stored, hs...)
	}
	return tlog.TreeHash(int64(len(entries)), reader)
}

func transparencyCase(doc, c, out map[string]any) (map[string]any, error) {
	verdict := func(err error) (map[string]any, error) {
		out["result"] = "valid"
		if err != nil {
			out["result"] = "invalid"
		}
		return out, nil
	}
	switch vString(c, "type") {
	case "tree":
		size, _ := vInt(c, "size")
		all, _ := doc["entries"].([]any)
		if size < 0 || size > int64(len(all)) {
			return nil, errors.New("tree size past the entries")
		}
		var entries [][]byte
		for _, x := range all[:size] {
			s, _ := x.(string)
			e, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, err
			}
			entries = append(entries, e)
		}
		root, err := vectorTreeHash(entries)
		if err != nil {
			return nil, err
		}
		out["result"], out["root"] = "valid", base64.StdEncoding.EncodeToString(root[:])
	case "inclusion":
		size, _ := vInt(c, "size")
		index, _ := vInt(c, "index")
		leaf, err1 := vHashes(c, "leaf")
		root, err2 := vHashes(c, "root")
		proof, err3 := vHashes(c, "proof")
		if err := firstErr(err1, err2, err3); err != nil {
			return verdict(err)
		}
		return verdict(tlog.CheckRecord(proof, size, root[0], index, leaf[0]))
	case "consistency":
		oldSize, _ := vInt(c, "old_size")
		newSize, _ := vInt(c, "new_size")
		roots, err1 := vHashes(map[string]any{"r": []any{c["old_root"], c["new_root"]}}, "r")
		proof, err2 := vHashes(c, "proof")
		if err := firstErr(err1, err2); err != nil {
			return verdict(err)
		}
		if oldSize == 0 { // the empty tree is a prefix of every tree: nothing to prove
			if len(proof) != 0 || newSize < 0 {
				return verdict(errors.New("a proof from the empty tree"))
			}
			return verdict(nil)
		}
		return verdict(tlog.CheckTree(proof, newSize, roots[1], oldSize, roots[0]))
	case "checkpoint":
		var witnesses []string
		list, _ := c["witnesses"].([]any)
		for _, w := range list {
			s, _ := w.(string)
			witnesses = append(witnesses, s)
		}
		need, _ := vInt(c, "min_cosignatures")
		p, err := NewLogPolicy(vString(c, "log"), witnesses, int(need))
		if err != nil {
			return nil, err
		}
		ck, err := p.OpenCheckpoint(vString(c, "checkpoint"))
		if err != nil {
			out["result"], out["kind"] = "invalid", RejectReason(err)
			return out, nil
		}
		out["result"], out["size"], out["root"] = "valid", ck.TreeSize, base64.StdEncoding.EncodeToString(ck.Root)
	case "answer":
		exp, _ := c["expect"].(map[string]any)
		fpText := vString(exp, "sha256")
		if fpText == "" {
			fpText = vString(exp, "sha1")
		}
		fp, err := ParseFingerprint(fpText)
		if err != nil {
			return nil, err
		}
		bundleText, err := json.Marshal(c["bundle"])
		if err != nil {
			return nil, err
		}
		bundle, err := decodeJSON(bundleText)
		if err != nil {
			return nil, err
		}
		p, err := parseLogPolicy(bundle)
		if err != nil {
			return nil, err
		}
		var member []byte
		if m := c["transparency"]; m != nil {
			if member, err = json.Marshal(m); err != nil {
				return nil, err
			}
		}
		target := map[string]any{"host": exp["host"], "port": exp["port"], "ip": exp["ip"]}
		if _, err := p.CheckMember(member, target, fp); err != nil {
			out["result"], out["kind"] = "rejected", RejectReason(err)
			return out, nil
		}
		out["result"] = "valid"
	default:
		return nil, fmt.Errorf("unknown transparency case type %q", vString(c, "type"))
	}
	return out, nil
}
