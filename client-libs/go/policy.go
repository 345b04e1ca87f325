package converge

// Votes and consensus (pure). With stand-aside on, unreachable notaries do not count; off,
// they count as failures. With n counted notaries and s successes:
//
//	consensus: s == n and s >= 1
//	majority:  s >= ceil(n/2) and s >= 1
//	minority:  s >= 1
//
// Nobody asked, or everybody standing aside, is never trusted.

// Vote is one notary's reduced answer: "success", "failure" or "unreachable" (results may
// also be "skipped" when early return settled the verdict first).
type Vote string

const (
	VoteSuccess     Vote = "success"
	VoteFailure     Vote = "failure"
	VoteUnreachable Vote = "unreachable"
	VoteSkipped     Vote = "skipped"
)

func trusted(p Policy, s, f, u int, standAside bool) bool {
	counted := s + f
	if !standAside {
		counted += u
	}
	if s < 1 {
		return false
	}
	switch p {
	case Consensus:
		return s == counted
	case Majority:
		return s >= (counted+1)/2
	}
	return true
}

func countVotes(votes []Vote) (s, f, u int, err error) {
	for _, v := range votes {
		switch v {
		case VoteSuccess:
			s++
		case VoteFailure:
			f++
		case VoteUnreachable:
			u++
		default:
			return 0, 0, 0, badInput("vote", "unknown vote %q", v)
		}
	}
	return s, f, u, nil
}

// Decide is the verdict for a complete set of votes.
func Decide(p Policy, votes []Vote, standAside bool) (bool, error) {
	s, f, u, err := countVotes(votes)
	if err != nil {
		return false, err
	}
	return trusted(p, s, f, u, standAside), nil
}

// Settled returns the verdict when no outcome of the pending notaries can change it
// (settled = true), trying every split of the pending notaries.
func Settled(p Policy, votes []Vote, pending int, standAside bool) (verdict, settled bool, err error) {
	s, f, u, err := countVotes(votes)
	if err != nil {
		return false, false, err
	}
	first := trusted(p, s, f, u+pending, standAside)
	for ps := 0; ps <= pending; ps++ {
		for pf := 0; pf <= pending-ps; pf++ {
			if trusted(p, s+ps, f+pf, u+pending-ps-pf, standAside) != first {
				return false, false, nil
			}
		}
	}
	return first, true, nil
}

// Cache decisions (pure).

// CacheFutureSkew: entries further in the future than this are stale.
const CacheFutureSkew = 300

// cacheMillisecondsAbove: timestamps above this are JavaScript milliseconds.
const cacheMillisecondsAbove = 100_000_000_000

// CacheDecision says whether a stored entry (timestamp, nil = none) is usable at now:
// "hit", "stale" or "miss". lifetime nil = entries never expire.
func CacheDecision(timestamp *int64, now float64, lifetime *float64) string {
	if timestamp == nil {
		return "miss"
	}
	ts := *timestamp
	if ts > cacheMillisecondsAbove {
		ts /= 1000
	}
	age := now - float64(ts)
	if age < -CacheFutureSkew {
		return "stale"
	}
	if lifetime != nil && age > *lifetime {
		return "stale"
	}
	return "hit"
}
