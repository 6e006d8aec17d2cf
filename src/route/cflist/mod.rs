//! The shared Cloudflare domain list (`--cf-domain-list URL|FILE`), sans-IO: where the list
//! comes from ([`Source`], [`Url`]), how one published entry decodes to a host name
//! ([`decode_entry`], docs/protocol.md §4.3 "Shared domain list"), which names are valid
//! ([`valid_host`]), when a fetched list is kept ([`accept`]: at least [`MIN_VALID`] valid,
//! distinct names), the on-disk cache format ([`cache_text`], [`parse_cache`]) and when the next
//! fetch is due ([`Schedule`]: jittered refresh, exponential backoff after failures).
//!
//! Owns no socket, file, clock or log: the shell in `fetch.rs` (compiled as `reactor::cflist`) does the fetch (DNS, TLS, the HTTP/1.1
//! GET parsed by [`http`]), reads a FILE source, writes the cache and hands accepted lists to
//! the ladder as `Config::cf_shared_domains`. Time is `u64` ms on the caller's clock; randomness
//! is the caller's [`Rng`].

pub mod http;

use std::path::PathBuf;

use crate::rng::Rng;

/// What a published entry's `.com` ending stands for (docs/protocol.md §4.3).
pub const DECODED_SUFFIX: &str = ".co.uk";

/// A list is accepted only with at least this many valid, distinct host names.
pub const MIN_VALID: usize = 3;

/// Names taken from one list, at most (the rest are dropped, and counted: the fetch's log line
/// and `ctl status` say how many).
pub const MAX_DOMAINS: usize = 64;

/// First line of the cache file; a file without it is not ours and is ignored.
pub const CACHE_HEADER: &str = "# tg-ws-proxy shared cf domain list (decoded)";

/// An `https://HOST[:PORT]/PATH` URL (no user info, no fragment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// Host name or IP literal, lower case: SNI, `Host` and the name resolved.
    pub host: String,
    /// TCP port (443 unless given).
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.port == 443 {
            write!(f, "https://{}{}", self.host, self.path)
        } else {
            write!(f, "https://{}:{}{}", self.host, self.port, self.path)
        }
    }
}

/// Parses an absolute `https://` URL. Errors (as text): another scheme, an empty or bad host,
/// a bad port, user info.
pub fn parse_url(s: &str) -> Result<Url, String> {
    let rest = s
        .strip_prefix("https://")
        .ok_or_else(|| format!("{s:?}: only https:// URLs are fetched"))?;
    let rest = rest.split('#').next().unwrap_or("");
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_string()),
    };
    if authority.contains('@') {
        return Err(format!("{s:?}: user info in a URL is not supported"));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| format!("{s:?}: bad port {p:?}"))?,
        ),
        None => (authority, 443),
    };
    let host = host.to_ascii_lowercase();
    if host.parse::<std::net::Ipv4Addr>().is_err() && !valid_name(&host) {
        return Err(format!("{s:?}: bad host name {host:?}"));
    }
    Ok(Url { host, port, path })
}

/// Where the list comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Fetched over HTTPS.
    Url(Url),
    /// Read from a local file (same format as the published list).
    File(PathBuf),
}

/// Parses a `--cf-domain-list` value: `off` (`None`), an `https://` URL, or a file path
/// (anything else not starting with a scheme). Errors: `http://` or another scheme, a bad URL.
pub fn parse_source(s: &str) -> Result<Option<Source>, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    if s.is_empty() {
        return Err("empty value (use off to turn the shared list off)".into());
    }
    if s.starts_with("https://") {
        return parse_url(s).map(|u| Some(Source::Url(u)));
    }
    if s.contains("://") {
        return Err(format!("{s:?}: only https:// URLs or a file path"));
    }
    Ok(Some(Source::File(PathBuf::from(s))))
}

/// Decodes one published entry: an entry ending in `.com` has every ASCII letter before it
/// shifted back (case kept, wrapping in the alphabet) by the number of letters before it, and
/// `.com` replaced by [`DECODED_SUFFIX`]; any other entry is returned unchanged.
pub fn decode_entry(entry: &str) -> String {
    let Some(prefix) = entry.strip_suffix(".com") else {
        return entry.to_string();
    };
    let mut out = rotate_letters(prefix, false);
    out.push_str(DECODED_SUFFIX);
    out
}

/// Encodes `name` (ending in [`DECODED_SUFFIX`]) the way the published list does: the inverse of
/// [`decode_entry`]. `None` for another ending. For tests and for making a list of one's own.
pub fn encode_entry(name: &str) -> Option<String> {
    let prefix = name.strip_suffix(DECODED_SUFFIX)?;
    let mut out = rotate_letters(prefix, true);
    out.push_str(".com");
    Some(out)
}

/// Every ASCII letter of `prefix` moved by the count of its letters (mod 26), forward when
/// `forward`, else back, wrapping within its case; other characters unchanged.
fn rotate_letters(prefix: &str, forward: bool) -> String {
    let n = (prefix.bytes().filter(u8::is_ascii_alphabetic).count() % 26) as u8;
    let shift = if forward { n } else { 26 - n };
    prefix
        .bytes()
        .map(|b| {
            let base = match b {
                b'a'..=b'z' => b'a',
                b'A'..=b'Z' => b'A',
                _ => return b as char,
            };
            (base + (b - base + shift) % 26) as char
        })
        .collect()
}

/// A host name the pool takes (lower case expected): at most 253 characters, at least two
/// labels, each 1–63 of `a-z 0-9 -` not starting or ending with `-`, and a last label of at
/// least two characters with a letter in it. No IP literals, no trailing dot.
pub fn valid_host(name: &str) -> bool {
    valid_name(name) && name.contains('.')
}

fn valid_name(name: &str) -> bool {
    if name.is_empty() || name.len() > 253 {
        return false;
    }
    let labels: Vec<&str> = name.split('.').collect();
    let label_ok = |l: &&str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let last = labels[labels.len() - 1];
    labels.iter().all(label_ok) && last.len() >= 2 && last.bytes().any(|b| b.is_ascii_lowercase())
}

/// A list after decoding: the valid, distinct names in list order (at most [`MAX_DOMAINS`]),
/// how many more valid, distinct names there were past that cap (dropped), and how many
/// entries it had (comment and blank lines not counted).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    /// Valid, distinct, lower-case host names.
    pub domains: Vec<String>,
    /// Valid, distinct names past [`MAX_DOMAINS`], left out.
    pub dropped: usize,
    /// Entries seen.
    pub entries: usize,
}

fn collect(text: &str, decode: bool) -> Decoded {
    let mut d = Decoded::default();
    let mut seen_past_cap: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        d.entries += 1;
        let name = if decode {
            decode_entry(line)
        } else {
            line.to_string()
        };
        let name = name.to_ascii_lowercase();
        if !valid_host(&name) || d.domains.contains(&name) {
            continue;
        }
        if d.domains.len() < MAX_DOMAINS {
            d.domains.push(name);
        } else if !seen_past_cap.contains(&name) {
            // Bounded by the body's size limit; only counted.
            seen_past_cap.push(name);
            d.dropped += 1;
        }
    }
    d
}

/// Decodes a published list: one entry a line; blank lines and lines starting with `#` are
/// skipped; each entry is trimmed, decoded ([`decode_entry`]), lower-cased, validated and
/// de-duplicated.
pub fn decode_list(text: &str) -> Decoded {
    collect(text, true)
}

/// Reads a cache file's text: the names it holds (not decoded again). A text without
/// [`CACHE_HEADER`] yields nothing.
pub fn parse_cache(text: &str) -> Decoded {
    if !text.starts_with(CACHE_HEADER) {
        return Decoded::default();
    }
    collect(text, false)
}

/// The cache file's text for `domains`.
pub fn cache_text(domains: &[String]) -> String {
    let mut s = String::from(CACHE_HEADER);
    s.push('\n');
    for d in domains {
        s.push_str(d);
        s.push('\n');
    }
    s
}

/// An accepted list: the names taken and how many valid names past [`MAX_DOMAINS`] were
/// dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Accepted {
    /// The names taken (at most [`MAX_DOMAINS`]).
    pub domains: Vec<String>,
    /// Valid, distinct names left out past the cap.
    pub dropped: usize,
}

impl Accepted {
    /// `accepted N domains`, and the names dropped past the cap when there were any.
    pub fn summary(&self) -> String {
        let kept = self.domains.len();
        if self.dropped == 0 {
            format!("accepted {kept} domains")
        } else {
            format!(
                "accepted {kept} domains, dropped {} more (at most {MAX_DOMAINS} are taken)",
                self.dropped
            )
        }
    }
}

/// The accept rule: the decoded names (and the count dropped past the cap) if there are at
/// least [`MIN_VALID`]; else why not.
pub fn accept(d: Decoded) -> Result<Accepted, String> {
    if d.domains.len() >= MIN_VALID {
        Ok(Accepted {
            domains: d.domains,
            dropped: d.dropped,
        })
    } else {
        Err(format!(
            "{} valid host name(s) of {} entries, need at least {MIN_VALID}",
            d.domains.len(),
            d.entries
        ))
    }
}

/// When the next fetch is due. All times ms.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// Refresh interval after a success (`--cf-domain-list-refresh`), jittered ± 20 %.
    pub refresh_ms: u64,
    /// First wait after a failure (`--cf-domain-list-retry`); doubles per failure in a row up
    /// to `refresh_ms`, jittered ± 20 %.
    pub retry_ms: u64,
    /// Failures in a row.
    pub failures: u32,
}

/// Jitter of every computed wait, ± percent.
pub const JITTER_PCT: u32 = 20;

impl Schedule {
    /// A schedule with no failures yet.
    pub fn new(refresh_ms: u64, retry_ms: u64) -> Schedule {
        Schedule {
            refresh_ms: refresh_ms.max(1),
            retry_ms: retry_ms.max(1),
            failures: 0,
        }
    }

    /// The fetch at `now` succeeded (list accepted, or a valid answer that was rejected by the
    /// accept rule is still a failure): the next fetch time.
    pub fn after_success(&mut self, now: u64, rng: &mut Rng) -> u64 {
        self.failures = 0;
        now + rng.jitter(self.refresh_ms, JITTER_PCT).max(1)
    }

    /// The fetch at `now` failed: the next fetch time (backoff `retry_ms × 2^(failures−1)`,
    /// capped at `refresh_ms`).
    pub fn after_failure(&mut self, now: u64, rng: &mut Rng) -> u64 {
        let shift = self.failures.min(20);
        self.failures = self.failures.saturating_add(1);
        let wait = self
            .retry_ms
            .saturating_mul(1u64 << shift)
            .min(self.refresh_ms.max(self.retry_ms));
        now + rng.jitter(wait, JITTER_PCT).max(1)
    }
}

#[cfg(test)]
mod tests;
