package converge

import (
	"crypto/sha256"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"
)

// Our inclusion check agrees with tlog's own proofs on every index of every tree up to 70
// leaves; the twin: one flipped proof byte, a proof one hash short or long, and another
// index are all refused.
func TestCheckInclusionAgreesWithTlogProofs(t *testing.T) {
	var hashes []tlog.Hash
	var leaves []tlog.Hash
	reader := storedReader(&hashes)
	for n := int64(0); n < 70; n++ {
		leaf := tlog.RecordHash([]byte{byte(n), 'e'})
		leaves = append(leaves, leaf)
		stored, err := tlog.StoredHashes(n, []byte{byte(n), 'e'}, reader)
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, stored...)
		size := n + 1
		root, err := tlog.TreeHash(size, reader)
		if err != nil {
			t.Fatal(err)
		}
		for i := int64(0); i < size; i++ {
			proof, err := tlog.ProveRecord(size, i, reader)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkInclusion(proof, size, root, i, leaves[i]); err != nil {
				t.Fatalf("size %d index %d: %v", size, i, err)
			}
			if len(proof) > 0 {
				bad := append(tlog.RecordProof{}, proof...)
				bad[0][0] ^= 1
				if checkInclusion(bad, size, root, i, leaves[i]) == nil {
					t.Fatalf("size %d index %d: a flipped proof verified", size, i)
				}
				if checkInclusion(proof[:len(proof)-1], size, root, i, leaves[i]) == nil {
					t.Fatalf("size %d index %d: a short proof verified", size, i)
				}
			}
			if checkInclusion(append(proof, root), size, root, i, leaves[i]) == nil {
				t.Fatalf("size %d index %d: a long proof verified", size, i)
			}
			if size > 1 && checkInclusion(proof, size, root, (i+1)%size, leaves[i]) == nil {
				t.Fatalf("size %d index %d: another index verified", size, i)
			}
		}
	}
	if checkInclusion(nil, 5, tlog.Hash{}, 5, tlog.Hash{}) == nil {
		t.Fatal("an index past the tree verified")
	}
}

// A checkpoint may sign any size up to 2^63-1. tlog.CheckRecord looped for ever on sizes
// above 2^62; ours answers at once. The proof for index 0 of a tree of size n is one hash per
// bit of n-1, each a right sibling; the twin: a proof one hash short is refused.
func TestCheckInclusionOfAHugeTreeEnds(t *testing.T) {
	for _, size := range []int64{5_000_000_000_000_000_000, 1<<63 - 1} {
		leaf := tlog.RecordHash([]byte("entry"))
		proof := make(tlog.RecordProof, 63)
		root := leaf
		for i := range proof {
			proof[i] = sha256.Sum256([]byte{byte(i)})
			root = tlog.NodeHash(root, proof[i])
		}
		done := make(chan error, 2)
		go func() {
			done <- checkInclusion(proof, size, root, 0, leaf)
			done <- checkInclusion(proof[:62], size, root, 0, leaf)
		}()
		for want := 0; want < 2; want++ {
			select {
			case err := <-done:
				if (err == nil) != (want == 0) {
					t.Fatalf("size %d, proof of %d hashes: %v", size, 63-want, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("size %d: still checking after 5 s", size)
			}
		}
	}
}
