//! The notary's transparency log, client side (pure): the bundle's `transparency` member and
//! the check of an extended answer's proof of inclusion (docs/transparency.md, "Clients").
//!
//! Formats: c2sp.org/signed-note, c2sp.org/tlog-checkpoint, c2sp.org/tlog-cosignature; hashing
//! RFC 6962, verification RFC 9162 (2.1.3.2 inclusion, 2.1.4.2 consistency). Ed25519 and
//! SHA-256 are ring's; the verifier is this module's, pinned by the shared vectors
//! (`client-libs/vectors/transparency.json`, cross-checked against Go's
//! `golang.org/x/mod/sumdb/tlog` and `note`).
//!
//! [`check_member`] checks, in this order, each failure an [`AnswerRejected`] of the kind
//! named: the member is present (`log-missing`); after the bounds scan and the strict parse it
//! is an object with string `checkpoint` and `entry`, an integer `index` >= 0 and a `proof`
//! array of at most 63 strings (`log-proof`); the checkpoint is a note signed by the log's key
//! whose origin is the key's name (`log-checkpoint`); at least `min_cosignatures` of the
//! bundle's witnesses cosigned it and no listed witness's line fails (`log-witness`); the
//! entry is a `converge-observation/1` about the statement's target and the fingerprint asked
//! (`log-entry`); the proof puts `SHA-256(0x00 || entry)` at `index` in the checkpoint's tree
//! (`log-proof`).

use crate::error::{err, Kind, Result};
use crate::extended::{AnswerRejected, Reject};
use crate::fingerprint::Fingerprint;
use crate::json::{as_int, bounds_ok, parse_object};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ring::digest::{digest, SHA256};
use ring::signature::{UnparsedPublicKey, ED25519};
use serde_json::{Map, Value};

/// Where the statement ends when an answer carries a transparency member.
pub const TRANSPARENCY_MEMBER: &[u8] = b",\"transparency\":";
/// The type of a logged entry.
pub const ENTRY_TYPE: &str = "converge-observation/1";
const HASH_SIZE: usize = 32;
const MAX_PROOF: usize = 63;
const MAX_NOTE: usize = 64 * 1024;
const MAX_SIGNATURE_LINES: usize = 100;
const MAX_WITNESSES: usize = 32;
/// Key type byte of a log's Ed25519 signing key.
pub const KEY_ED25519: u8 = 0x01;
/// Key type byte of a witness's timestamped Ed25519 cosignature key.
pub const KEY_COSIGNATURE: u8 = 0x04;
const SIG_PREFIX: &str = "\u{2014} ";

/// A signed-note verifier key: `<name>+<8 hex key id>+<base64 of type || 32-byte key>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteKey {
    pub name: String,
    pub key_id: [u8; 4],
    pub public_key: Vec<u8>,
    pub kind: u8,
    /// The key as written.
    pub vkey: String,
}

/// A bundle's `transparency` member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPolicy {
    pub log: NoteKey,
    pub url: Option<String>,
    pub witnesses: Vec<NoteKey>,
    pub min_cosignatures: usize,
}

/// A checkpoint that verified: the log's tree of `size` entries with `root`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub origin: String,
    pub size: u64,
    pub root: [u8; 32],
    pub cosigned_by: Vec<String>,
}

/// What a valid member proves: `entry` at `index` of the tree of `checkpoint`.
#[derive(Debug, Clone)]
pub struct Proven {
    pub index: u64,
    pub entry: Map<String, Value>,
    pub checkpoint: Checkpoint,
}

fn fail<T>(kind: Reject, message: impl Into<String>) -> std::result::Result<T, AnswerRejected> {
    Err(AnswerRejected { reason: kind, message: message.into() })
}

/// Padded standard base64 (no white space).
pub fn b64(text: &str) -> Option<Vec<u8>> {
    STANDARD.decode(text).ok()
}

fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, &parts.concat()).as_ref());
    out
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('+') && name.chars().all(|c| !c.is_whitespace() && !c.is_control())
}

/// The 4-byte key id of a key: `SHA-256(name || "\n" || type || key)[:4]`.
pub fn key_id(name: &str, kind: u8, key: &[u8]) -> [u8; 4] {
    let h = sha256(&[name.as_bytes(), b"\n", &[kind], key]);
    [h[0], h[1], h[2], h[3]]
}

/// Parses a verifier key of type `kind`, refuses a weak key ([`crate::bundle::weak_key`]) and
/// checks its key id.
pub fn parse_note_key(text: &str, kind: u8) -> std::result::Result<NoteKey, String> {
    let mut parts = text.splitn(3, '+');
    let (name, hex, key) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next());
    let id_ok = hex.len() == 8 && hex.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
    let Some(key) = key.filter(|_| text.len() <= 1024 && valid_name(name) && id_ok) else {
        return Err(format!("{text:.80?} is not <name>+<8 hex>+<base64 key>"));
    };
    let raw = b64(key).filter(|r| r.len() == 33 && r[0] == kind);
    let Some(raw) = raw else { return Err(format!("{text:.80?} is not a type 0x{kind:02x} Ed25519 key")) };
    if let Some(weak) = crate::bundle::weak_key(&raw[1..]) {
        return Err(format!("{text:.80?}: {weak}"));
    }
    let id = key_id(name, kind, &raw[1..]);
    if id.iter().map(|b| format!("{b:02x}")).collect::<String>() != hex {
        return Err(format!("{text:.80?}: the key id does not match the key"));
    }
    Ok(NoteKey { name: name.to_string(), key_id: id, public_key: raw[1..].to_vec(), kind, vkey: text.to_string() })
}

fn bundle_err<T>(message: impl Into<String>) -> Result<T> {
    err(Kind::Bundle, message)
}

/// Parses a bundle's `transparency` member; errors have kind `bundle`.
pub fn parse_log_policy(v: &Value) -> Result<LogPolicy> {
    let Value::Object(obj) = v else { return bundle_err("transparency must be an object") };
    if let Some(k) = obj.keys().find(|k| !matches!(k.as_str(), "log" | "url" | "witnesses" | "min_cosignatures")) {
        return bundle_err(format!("unknown transparency field {k:?}"));
    }
    let log = match obj.get("log").and_then(Value::as_str).map(|t| parse_note_key(t, KEY_ED25519)) {
        Some(Ok(k)) => k,
        Some(Err(e)) => return bundle_err(format!("transparency log key: {e}")),
        None => return bundle_err("transparency log key must be a string"),
    };
    let url = match obj.get("url") {
        None | Some(Value::Null) => None,
        Some(Value::String(u)) if u.starts_with("https://") && u.chars().count() <= 2048 => Some(u.clone()),
        _ => return bundle_err("transparency url must be an https:// URL"),
    };
    let empty = vec![];
    let list = match obj.get("witnesses") {
        None => &empty,
        Some(Value::Array(l)) if l.len() <= MAX_WITNESSES => l,
        _ => return bundle_err(format!("transparency witnesses must be a list of at most {MAX_WITNESSES}")),
    };
    let mut witnesses: Vec<NoteKey> = vec![];
    for w in list {
        let (name, vkey) = match w {
            Value::Object(m) if m.len() == 2 => {
                (m.get("name").and_then(Value::as_str), m.get("vkey").and_then(Value::as_str))
            }
            _ => (None, None),
        };
        let (Some(name), Some(vkey)) = (name, vkey) else {
            return bundle_err("a witness is an object with name and vkey");
        };
        let key = parse_note_key(vkey, KEY_COSIGNATURE).or_else(|e| bundle_err(format!("witness key: {e}")))?;
        if key.name != name {
            return bundle_err(format!("witness name {name:.80?} is not its key's name"));
        }
        if witnesses.iter().any(|x| x.name == key.name && x.key_id == key.key_id) {
            return bundle_err("a witness is listed twice");
        }
        witnesses.push(key);
    }
    // One key under two names: a cosignature does not sign the witness's name, so one key
    // would count as two witnesses (or the log would cosign its own checkpoints).
    let keys: Vec<&[u8]> = std::iter::once(&log).chain(&witnesses).map(|k| k.public_key.as_slice()).collect();
    if keys.iter().enumerate().any(|(i, k)| keys[..i].contains(k)) {
        return bundle_err("transparency names one key twice (two witnesses, or a witness and the log)");
    }
    let need = match obj.get("min_cosignatures") {
        None => Some(0),
        Some(n) => as_int(n).filter(|&n| n >= 0 && n as usize <= witnesses.len()),
    };
    let Some(need) = need else {
        return bundle_err(format!("min_cosignatures must be an integer from 0 to {}", witnesses.len()));
    };
    Ok(LogPolicy { log, url, witnesses, min_cosignatures: need as usize })
}

// ------------------------------------------------------------------------------ hashing

/// `SHA-256(0x00 || entry)`.
pub fn leaf_hash(entry: &[u8]) -> [u8; 32] {
    sha256(&[&[0], entry])
}

/// `SHA-256(0x01 || left || right)`.
pub fn node_hash(left: &[u8], right: &[u8]) -> [u8; 32] {
    sha256(&[&[1], left, right])
}

/// RFC 6962, 2.1: the root of the leaf hashes `leaves`.
pub fn tree_root(leaves: &[[u8; 32]]) -> [u8; 32] {
    match leaves.len() {
        0 => sha256(&[]),
        1 => leaves[0],
        n => {
            let k = 1usize << (usize::BITS - 1 - (n - 1).leading_zeros());
            node_hash(&tree_root(&leaves[..k]), &tree_root(&leaves[k..]))
        }
    }
}

/// RFC 9162, 2.1.3.2: whether `proof` puts `leaf` at `index` in the tree of `size` with `root`.
pub fn verify_inclusion(leaf: &[u8], index: u64, size: u64, proof: &[Vec<u8>], root: &[u8]) -> bool {
    if index >= size || proof.iter().any(|p| p.len() != HASH_SIZE) || leaf.len() != HASH_SIZE {
        return false;
    }
    let (mut fn_, mut sn, mut r) = (index, size - 1, leaf.to_vec());
    for p in proof {
        if sn == 0 {
            return false;
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r).to_vec();
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            r = node_hash(&r, p).to_vec();
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    sn == 0 && r == root
}

/// RFC 9162, 2.1.4.2: whether the tree of `old` entries with `old_root` is a prefix of the tree
/// of `new` entries with `new_root`.
pub fn verify_consistency(old: u64, new: u64, old_root: &[u8], new_root: &[u8], proof: &[Vec<u8>]) -> bool {
    if old > new || proof.iter().any(|p| p.len() != HASH_SIZE) {
        return false;
    }
    if old == new || old == 0 {
        return proof.is_empty() && (old != new || old_root == new_root);
    }
    let mut path: Vec<&[u8]> = proof.iter().map(Vec::as_slice).collect();
    if old & (old - 1) == 0 {
        path.insert(0, old_root);
    }
    let Some((first, rest)) = path.split_first() else { return false };
    let (mut fn_, mut sn) = (old - 1, new - 1);
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    let (mut fr, mut sr) = (first.to_vec(), first.to_vec());
    for c in rest {
        if sn == 0 {
            return false;
        }
        if fn_ & 1 == 1 || fn_ == sn {
            fr = node_hash(c, &fr).to_vec();
            sr = node_hash(c, &sr).to_vec();
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            sr = node_hash(&sr, c).to_vec();
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    sn == 0 && fr == old_root && sr == new_root
}

// ------------------------------------------------------------------------------ notes

type SigLine = (String, [u8; 4], Vec<u8>);

/// The text and the signature lines of a signed note.
fn split_note(note: &str) -> std::result::Result<(&str, Vec<SigLine>), String> {
    if note.len() > MAX_NOTE {
        return Err(format!("note larger than {MAX_NOTE} bytes"));
    }
    if note.chars().any(|c| c != '\n' && c.is_control()) {
        return Err("control character in the note".into());
    }
    let cut = note.rfind("\n\n").filter(|&c| note.ends_with('\n') && c + 3 <= note.len()).ok_or("not a signed note")?;
    let (text, block) = (&note[..cut + 1], &note[cut + 2..note.len() - 1]);
    let lines: Vec<&str> = block.split('\n').collect();
    if lines.len() > MAX_SIGNATURE_LINES {
        return Err("too many signature lines".into());
    }
    let mut sigs = vec![];
    for line in lines {
        let (name, sig) =
            line.strip_prefix(SIG_PREFIX).and_then(|l| l.split_once(' ')).ok_or("malformed signature line")?;
        let raw = b64(sig).filter(|r| r.len() >= 5 && valid_name(name)).ok_or("malformed signature line")?;
        sigs.push((name.to_string(), [raw[0], raw[1], raw[2], raw[3]], raw[4..].to_vec()));
    }
    Ok((text, sigs))
}

fn parse_checkpoint_text(text: &str) -> std::result::Result<(&str, u64, [u8; 32]), String> {
    let lines: Vec<&str> = text[..text.len() - 1].split('\n').collect();
    if lines.len() < 3 || lines.iter().any(|l| l.is_empty()) {
        return Err("a checkpoint has origin, size and root lines".into());
    }
    let size_ok = lines[1] == "0" || (!lines[1].starts_with('0') && lines[1].bytes().all(|c| c.is_ascii_digit()));
    let size = lines[1].parse::<u64>().ok().filter(|_| size_ok).ok_or("size is not a decimal without leading zeros")?;
    let root = b64(lines[2]).filter(|r| r.len() == HASH_SIZE).ok_or("root is not 32 bytes")?;
    let mut r = [0u8; 32];
    r.copy_from_slice(&root);
    Ok((lines[0], size, r))
}

/// Whether `key` signed `message` (its first line verifies); `Err` if that line does not.
fn signed_by(key: &NoteKey, sigs: &[SigLine], message: &[u8]) -> std::result::Result<bool, String> {
    let Some((_, _, sig)) = sigs.iter().find(|(n, id, _)| *n == key.name && *id == key.key_id) else {
        return Ok(false);
    };
    let public = UnparsedPublicKey::new(&ED25519, &key.public_key);
    let ok = if key.kind == KEY_COSIGNATURE {
        sig.len() == 8 + 64 && {
            let t = u64::from_be_bytes(sig[..8].try_into().unwrap_or_default());
            let signed = [format!("cosignature/v1\ntime {t}\n").as_bytes(), message].concat();
            public.verify(&signed, &sig[8..]).is_ok()
        }
    } else {
        public.verify(message, sig).is_ok()
    };
    if ok {
        Ok(true)
    } else {
        Err(format!("the signature line of {} does not verify", key.name))
    }
}

/// Checks a checkpoint (signed by the log, cosigned by enough of the bundle's witnesses);
/// `log-checkpoint` or `log-witness` else.
pub fn open_checkpoint(note: &str, policy: &LogPolicy) -> std::result::Result<Checkpoint, AnswerRejected> {
    let opened = split_note(note).and_then(|(text, sigs)| {
        let (origin, size, root) = parse_checkpoint_text(text)?;
        if origin != policy.log.name {
            return Err(format!("origin {origin:.80?} is not the log's"));
        }
        if !signed_by(&policy.log, &sigs, text.as_bytes())? {
            return Err("no signature by the log's key".into());
        }
        Ok((text, sigs, origin.to_string(), size, root))
    });
    let (text, sigs, origin, size, root) = match opened {
        Ok(x) => x,
        Err(e) => return fail(Reject::LogCheckpoint, format!("checkpoint: {e}")),
    };
    let mut cosigned_by = vec![];
    for w in &policy.witnesses {
        match signed_by(w, &sigs, text.as_bytes()) {
            Ok(true) => cosigned_by.push(w.name.clone()),
            Ok(false) => {}
            Err(e) => return fail(Reject::LogWitness, format!("checkpoint: {e}")),
        }
    }
    if cosigned_by.len() < policy.min_cosignatures {
        return fail(
            Reject::LogWitness,
            format!(
                "checkpoint cosigned by {} of the bundle's witnesses, {} required",
                cosigned_by.len(),
                policy.min_cosignatures
            ),
        );
    }
    Ok(Checkpoint { origin, size, root, cosigned_by })
}

// ------------------------------------------------------------------------------ the member

fn same_value(a: Option<&Value>, b: Option<&Value>) -> bool {
    let a = a.filter(|v| !v.is_null());
    let b = b.filter(|v| !v.is_null());
    match (a, b) {
        (None, None) => true,
        (Some(Value::String(x)), Some(Value::String(y))) => x == y,
        (Some(x), Some(y)) => as_int(x).is_some() && as_int(x) == as_int(y),
        _ => false,
    }
}

/// Checks an answer's `transparency` member (its raw bytes, `None` when absent) for the
/// statement's `target` (`host`, `port`, `ip`) and the fingerprint asked about.
pub fn check_member(
    member: Option<&[u8]>,
    policy: &LogPolicy,
    target: &Map<String, Value>,
    fp: &Fingerprint,
) -> std::result::Result<Proven, AnswerRejected> {
    let Some(member) = member else {
        return fail(Reject::LogMissing, "the answer carries no proof of inclusion in the log");
    };
    let Some(obj) = parse_object(member).filter(|_| bounds_ok(member)) else {
        return fail(Reject::LogProof, "transparency member is not a bounded strict JSON object");
    };
    let checkpoint = obj.get("checkpoint").and_then(Value::as_str);
    let entry = obj.get("entry").and_then(Value::as_str);
    let index = obj.get("index").and_then(Value::as_u64);
    let proof: Option<Vec<&str>> = match obj.get("proof") {
        Some(Value::Array(l)) if l.len() <= MAX_PROOF => l.iter().map(Value::as_str).collect(),
        _ => None,
    };
    let (Some(checkpoint), Some(entry), Some(index), Some(proof)) = (checkpoint, entry, index, proof) else {
        return fail(Reject::LogProof, "transparency member lacks checkpoint, entry, index or proof");
    };
    let ck = open_checkpoint(checkpoint, policy)?;
    let raw = b64(entry);
    let Some((raw, doc)) = raw.and_then(|r| parse_object(&r).filter(|_| bounds_ok(&r)).map(|d| (r, d))) else {
        return fail(Reject::LogEntry, "the logged entry is not base64 of a JSON object");
    };
    if doc.get("type").and_then(Value::as_str) != Some(ENTRY_TYPE) {
        return fail(Reject::LogEntry, format!("the logged entry is not a {ENTRY_TYPE}"));
    }
    for name in ["host", "port", "ip"] {
        if !same_value(doc.get(name), target.get(name)) {
            return fail(Reject::LogEntry, format!("the logged entry's {name} is not the answer's"));
        }
    }
    if doc.get(fp.algorithm.as_str()).and_then(Value::as_str) != Some(fp.colon_hex().as_str()) {
        return fail(Reject::LogEntry, "the logged entry is about another certificate");
    }
    let Some(hashes) = proof.iter().map(|p| b64(p).filter(|h| h.len() == HASH_SIZE)).collect::<Option<Vec<_>>>() else {
        return fail(Reject::LogProof, "a proof hash is not 32 bytes of base64");
    };
    if !verify_inclusion(&leaf_hash(&raw), index, ck.size, &hashes, &ck.root) {
        return fail(Reject::LogProof, "the inclusion proof does not lead to the checkpoint's root");
    }
    Ok(Proven { index, entry: doc, checkpoint: ck })
}

/// Cuts the statement bytes at the first `,"transparency":` (`None`: no member).
pub fn split_member(body: &[u8]) -> (&[u8], Option<&[u8]>) {
    match body.windows(TRANSPARENCY_MEMBER.len()).position(|w| w == TRANSPARENCY_MEMBER) {
        Some(i) => (&body[..i], Some(&body[i + TRANSPARENCY_MEMBER.len()..])),
        None => (body, None),
    }
}
