//! The structured event stream: one JSON object per line, appended to the file named by the
//! `TG_EVENTS` environment variable of `run` (off when unset or empty). For tests and for
//! tools that want facts rather than log wording: a test asserts that a session ended with
//! reason `bad-init`, not that some line contains the words.
//!
//! Events (every object has `"event"` and `"ms"`, milliseconds since the stream was opened at start, monotonic):
//! * `session`: a client connection ended — `peer`, `fake_tls`, `dc` (`DC2`, `-DC4`, or null
//!   before the handshake told it), `tier` (null if no upstream was won), `target` (the route's
//!   label, ` (pooled)` when served from a warm pool; empty if none), `plain_ws` (true when the
//!   upstream ran over plain `ws://` without TLS: the `cfproxy-ws` tier), `masked`, `up` and
//!   `down` (payload bytes), `closed_by` (`client`, `upstream`, `proxy`), `reason` (a
//!   `CloseReason` name), `froze` (a `Freeze` name or null).
//!   Also `mask_why` (a `MaskWhy` name) and `mask_target` (`HOST:PORT (ADDR)`) of a session
//!   relayed to the mask host, both null otherwise.
//! * `route`: a route's health changed — `label`, `to` (`down`, `suspect`, `up`), `failure`
//!   (the `Failure` name that put it down or made it suspect, null for `up`), `via` (what
//!   proved it up: `probe`, `probe pulled N bytes`, `session`; null otherwise), `cooldown_ms`
//!   (0 unless down); a `down` event adds `redirect` (no WS front for this DC: re-probed when
//!   the TTL ends) and `quarantined` (flapping); an `up` event adds `from` (`unknown`, `up`,
//!   `suspect`, `down`).
//! * `pool_ready`: a warm upstream joined a route's pool — `label`, `dial_ms` (its dial's
//!   duration).
//! * `pool_flushed`: a pooled upstream stayed silent after a client's request and its route's
//!   warm upstreams as old or older were closed with it (`route::ladder`) — `label`, `flushed`
//!   (how many siblings; 0 if none was left).
//! * `replay`: a session's request is replayed on a fresh route after its pooled upstream
//!   stayed silent — `peer`.
//! * `refused`: a client turned away at accept, before any session — `peer`, `reason`
//!   (`slab-full`).
//! * `outbound`: the outbound proxy itself went `down` or came back `up` (`route::ladder::deps`)
//!   — `to`; `down` adds `failure` (the `Failure` name) and `on` (what dialled: `route LABEL`,
//!   `the shared list's fetch`); `up` adds `down_ms`.
//! * `outbound_resolved`: the outbound proxy's host name got an address — `host`, `ip`.
//! * `telegram`: the verdict whether Telegram is reachable at all changed (`route::verdict`,
//!   said by `route::ladder::deps`) — `to` (`unreachable`: every route tried failed, none
//!   pending; adds `tiers`, the tiers tried with their routes and failure; `reachable`: a route
//!   works, adds `route` and, after an outage, `down_ms`).
//! * `reach`: the network path changed (`route::reach`) — `scope` (`network`: every address
//!   tried fails; `address`: one address while others work), `to` (`down`, `up`), `label`
//!   (the address), `failure` (null for `up`).
//! * `attempt`: a client's dial of a route failed (`conn::connect`, with the attempt line) —
//!   `peer`, `label` (the route), `failure` (e.g. `network-unreachable`, `local-ports`),
//!   `started` (false: it could not start), `after_ms` (0 if not started).
//! * `cflist`: the shared CF domain list was `accepted`, `refused` or read from the `cached`
//!   file at start — `result`, `kept` (names taken; for `refused`, the shared domains kept in
//!   use), `dropped` (valid names past the cap), `why` (why refused, else null).
//! * `reload`: a reload (SIGHUP, `ctl reload`) ended — `result` (`applied`, `rejected`),
//!   `changed` and `restart` (the option names applied live and kept until a restart,
//!   comma-separated, empty if none), `listen` (the listen address after it).
//!
//! Like the `log` facade it is a process-wide sink: [`open_from_env`] once at start, then
//! [`emit`] from any layer. Cheap when off: one relaxed atomic load, the event is never built.
//! Writes are unbuffered whole lines (`O_APPEND`), so a reader sees complete objects; a write
//! that fails is dropped (never a panic, never a blocked reactor beyond one `write(2)` to a
//! local file).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// The environment variable naming the events file.
pub const ENV: &str = "TG_EVENTS";

static ON: AtomicBool = AtomicBool::new(false);
static SINK: OnceLock<(Mutex<File>, Instant)> = OnceLock::new();

/// Opens (creates, appends to) the file named by `TG_EVENTS`, if set and not empty. Errors:
/// the file cannot be opened (the message names it). A second call is a no-op.
pub fn open_from_env() -> Result<(), String> {
    let Some(path) = std::env::var_os(ENV).filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    if SINK.get().is_some() {
        return Ok(());
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("{ENV}={}: {e}", path.to_string_lossy()))?;
    let _ = SINK.set((Mutex::new(file), Instant::now()));
    ON.store(true, Ordering::Relaxed);
    Ok(())
}

/// True when events are written (build nothing otherwise).
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Writes the event `build` returns, if the stream is on (`build` is not called otherwise).
pub fn emit(build: impl FnOnce() -> Event) {
    if !enabled() {
        return;
    }
    let Some((file, start)) = SINK.get() else {
        return;
    };
    let mut line = build().0;
    line.push_str(&format!(",\"ms\":{}}}\n", start.elapsed().as_millis()));
    let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
    let _ = f.write_all(line.as_bytes());
}

/// One event being built: `Event::new("session").str("peer", …).num("up", 3)`.
pub struct Event(String);

impl Event {
    /// An event of kind `kind` (the `"event"` field).
    pub fn new(kind: &str) -> Event {
        Event(format!("{{\"event\":{}", quote(kind)))
    }

    /// A string field.
    pub fn str(mut self, key: &str, value: &str) -> Event {
        self.0
            .push_str(&format!(",{}:{}", quote(key), quote(value)));
        self
    }

    /// A string field, `null` when `None`.
    pub fn opt(mut self, key: &str, value: Option<&str>) -> Event {
        match value {
            Some(v) => self.str(key, v),
            None => {
                self.0.push_str(&format!(",{}:null", quote(key)));
                self
            }
        }
    }

    /// A number field.
    pub fn num(mut self, key: &str, value: u64) -> Event {
        self.0.push_str(&format!(",{}:{value}", quote(key)));
        self
    }

    /// A boolean field.
    pub fn bool(mut self, key: &str, value: bool) -> Event {
        self.0.push_str(&format!(",{}:{value}", quote(key)));
        self
    }
}

/// A JSON string literal for `s` (RFC 8259: `"` and `\` escaped, control characters as
/// `\n`, `\t`, … or `\u00XX`). Also the control socket's JSON (`control::render`).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_one_json_object() {
        let e = Event::new("session")
            .str("peer", "1.2.3.4:5")
            .opt("dc", None)
            .num("up", 7)
            .bool("masked", false)
            .str("odd", "a\"b\\c\n");
        assert_eq!(
            e.0,
            "{\"event\":\"session\",\"peer\":\"1.2.3.4:5\",\"dc\":null,\"up\":7,\
             \"masked\":false,\"odd\":\"a\\\"b\\\\c\\n\""
        );
    }

    #[test]
    fn off_builds_nothing() {
        if !enabled() {
            emit(|| panic!("built while off"));
        }
    }
}
