//! Votes, consensus policies and the local-cache rule (pure functions).
//!
//! With stand-aside on, unreachable notaries do not count; off, they count as failures. With
//! `n` counted notaries and `s` successes: consensus `s == n`, majority `s >= ceil(n/2)`,
//! minority `s >= 1`; never trusted without a success.

use crate::error::{err, Kind, Result};

/// The consensus rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Consensus,
    Majority,
    Minority,
}

impl Policy {
    /// The policy's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Consensus => "consensus",
            Policy::Majority => "majority",
            Policy::Minority => "minority",
        }
    }
}

/// Accepts the three policy names, any case, surrounding space ignored.
pub fn parse_policy(text: &str) -> Result<Policy> {
    match text.trim().to_lowercase().as_str() {
        "consensus" => Ok(Policy::Consensus),
        "majority" => Ok(Policy::Majority),
        "minority" => Ok(Policy::Minority),
        _ => err(Kind::Config, format!("notary-agreement must be consensus, majority or minority, not {text:?}")),
    }
}

/// One notary's answer reduced to a vote (`Skipped`: settled before it answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vote {
    Success,
    Failure,
    Unreachable,
    Skipped,
}

impl Vote {
    /// The vote's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Vote::Success => "success",
            Vote::Failure => "failure",
            Vote::Unreachable => "unreachable",
            Vote::Skipped => "skipped",
        }
    }

    /// Parses a vote word (`success`, `failure`, `unreachable`).
    pub fn parse(text: &str) -> Result<Vote> {
        match text {
            "success" => Ok(Vote::Success),
            "failure" => Ok(Vote::Failure),
            "unreachable" => Ok(Vote::Unreachable),
            _ => err(Kind::Vote, format!("unknown vote {text:?}")),
        }
    }
}

fn trusted(p: Policy, s: usize, f: usize, u: usize, stand_aside: bool) -> bool {
    let counted = s + f + if stand_aside { 0 } else { u };
    if s < 1 {
        return false;
    }
    match p {
        Policy::Consensus => s == counted,
        Policy::Majority => s >= counted.div_ceil(2),
        Policy::Minority => true,
    }
}

fn count(votes: &[Vote]) -> (usize, usize, usize) {
    let (mut s, mut f, mut u) = (0, 0, 0);
    for v in votes {
        match v {
            Vote::Success => s += 1,
            Vote::Failure => f += 1,
            Vote::Unreachable => u += 1,
            Vote::Skipped => {}
        }
    }
    (s, f, u)
}

/// The verdict for a complete set of votes (skipped ones are ignored).
pub fn decide(policy: Policy, votes: &[Vote], stand_aside: bool) -> bool {
    let (s, f, u) = count(votes);
    trusted(policy, s, f, u, stand_aside)
}

/// The verdict when no outcome of the `pending` notaries can change it, else `None` (every
/// split of the pending notaries is tried).
pub fn settled(policy: Policy, votes: &[Vote], pending: usize, stand_aside: bool) -> Option<bool> {
    let (s, f, u) = count(votes);
    let first = trusted(policy, s, f, u + pending, stand_aside);
    for ps in 0..=pending {
        for pf in 0..=(pending - ps) {
            if trusted(policy, s + ps, f + pf, u + pending - ps - pf, stand_aside) != first {
                return None;
            }
        }
    }
    Some(first)
}

/// Entries further in the future than this (seconds) are stale.
pub const CACHE_FUTURE_SKEW: f64 = 300.0;
const CACHE_MILLISECONDS_ABOVE: i64 = 100_000_000_000;

/// A local-cache decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheDecision {
    Hit,
    Stale,
    Miss,
}

impl CacheDecision {
    /// `hit`, `stale` or `miss`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheDecision::Hit => "hit",
            CacheDecision::Stale => "stale",
            CacheDecision::Miss => "miss",
        }
    }
}

/// Whether a stored entry (its timestamp; `None`: none) is usable at `now` (unix seconds);
/// `lifetime` in seconds, `None` = entries never expire. Timestamps above 10^11 are JavaScript
/// milliseconds (the 2011 add-on wrote those).
pub fn cache_decision(timestamp: Option<i64>, now: f64, lifetime: Option<f64>) -> CacheDecision {
    let Some(mut ts) = timestamp else { return CacheDecision::Miss };
    if ts > CACHE_MILLISECONDS_ABOVE {
        ts /= 1000;
    }
    let age = now - ts as f64;
    if age < -CACHE_FUTURE_SKEW {
        return CacheDecision::Stale;
    }
    if let Some(l) = lifetime {
        if age > l {
            return CacheDecision::Stale;
        }
    }
    CacheDecision::Hit
}
