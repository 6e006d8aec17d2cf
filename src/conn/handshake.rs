//! Inbound handshake: read exactly the 64-byte obfuscated2 init, check it against every
//! secret (docs/protocol.md §1.1–1.3), and either start connecting or drain a bad client; with
//! `ee` secrets, the fake-TLS handshake first (docs/protocol.md §2).
//!
//! ```text
//! First ─not TLS─► Init ───────────────────────────────► (init ok) Connecting
//!   │  └─TLS-like, not a hello (port with plain/dd)─► InitOrBadHello ─fails─► mask
//!   └─ClientHello─► Hello ─gate: ours─► Answer ─written─► TlsInit ─► (init ok) Connecting
//!                      └─not ours─► mask
//! ```
//! At the handshake deadline a TLS start still incomplete (in `First` with bytes, `Hello`,
//! `InitOrBadHello`) is masked as malformed with what was read; otherwise the close is
//! `handshake-timeout`.
//! The first bytes tell TLS from not (`faketls::hello::sniff`; with no `ee` secret they are not
//! looked at). A ClientHello record is read exactly (never past it, ≤ `MAX_HELLO_RECORD`) and
//! judged by the gate (`faketls::gate`: key, SNI, timestamp, replay); ours gets the ServerHello
//! answer, after which the client stream carries fake-TLS records (`client_io`) and the init
//! inside them must open with the matched secret alone. A hello that is not ours, and any
//! non-TLS client on a port whose secrets are all `ee`, goes to the mask host (`mask`) with
//! every byte read so far; an `ee` secret never opens a plain init. With no `ee` secret a TLS
//! start is today's `tls-to-plain-port` reject. A client over a per-client limit
//! (`Conn::over_limit`, `--per-ip-mask`) is treated as one that is not ours whatever it sends:
//! its hello is read and masked without being judged, and no init is accepted.
//!
//! Bad input (wrong secret, HTTP, TLS to a plain port, garbage) gets one rate-limited log line
//! (HTTP as soon as its first bytes show it: `GET `, `POST`, `CONNECT `, the HTTP/2 preface…)
//! with a distinct reason, then a short bounded drain (`--bad-client-drain`) and a close; an
//! init whose DC index names no DC (§1.4) is closed as `no-route` at once, and one naming a DC
//! that is neither in the table nor configured (`route::table::known_dc`) as `unknown-dc`, so
//! client input never creates per-DC state. Only this session is affected. On success it hands
//! over to `connect::Connecting` and arms the idle timer; nothing here dials upstream. The
//! gate's clock events are logged here once each ([`log_clock_events`]).

use log::{debug, info, warn};

use super::connect::Connecting;
use super::mask::MaskWhy;
use super::per_ip::Held;
use super::{Conn, Ctx, Phase, SessionTimer, Step};
use crate::config::Config;
use crate::error::CloseReason;
use crate::mtproto::dc::DcId;
use crate::mtproto::faketls::clock::{ClockEvent, CLOCK_FLOOR};
use crate::mtproto::faketls::gate::{Gate, Reject};
use crate::mtproto::faketls::hello::{self, Sniff};
use crate::mtproto::faketls::server_hello::{server_hello, MAX_SERVER_HELLO};
use crate::mtproto::faketls::RECORD_HEADER;
use crate::mtproto::obfs2::{self, Accepted, Secret, SecretKind, INIT_LEN};
use crate::mtproto::sniff::{self, is_http};
use crate::net::io::{read_once, write_once, Io};
use crate::relay::end::client_read_failure;
use crate::relay::{ClientSide, StallWatch};
use crate::route::table::known_dc;

/// Bytes discarded per drain read.
const DRAIN_CHUNK: usize = 4096;

/// Where the handshake is.
#[derive(Debug, PartialEq, Eq)]
enum Stage {
    /// Nothing decided yet: with `ee` secrets the first bytes (≤ 5) say TLS or not.
    First,
    /// Reading the 64-byte obfuscated2 init straight on TCP, checked against every plain and
    /// `dd` secret.
    Init,
    /// The same, on a port that also has `ee` secrets, after first bytes that start like a TLS
    /// handshake record but cannot be a ClientHello we read (`hello::Sniff::Bad`): tried as an
    /// init (an init starts with 0x16 one time in 256), masked as a malformed hello if it fails.
    InitOrBadHello,
    /// Reading exactly the ClientHello record (header included), sized to its announced length.
    Hello { record: Vec<u8>, got: usize },
    /// Writing our answer to an accepted hello; `sent` bytes of `answer` are out.
    Answer {
        answer: Vec<u8>,
        sent: usize,
        matched: Matched,
    },
    /// Reading the 64-byte init inside fake-TLS records, checked with the matched secret only.
    TlsInit { matched: Matched },
}

/// The `ee` secret an accepted ClientHello matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Matched {
    /// Index into `Config::secrets`.
    index: usize,
    key: [u8; 16],
}

/// The client's handshake: the init being collected, and the fake-TLS steps before it.
pub struct Handshake {
    init: [u8; INIT_LEN],
    got: usize,
    stage: Stage,
}

impl Handshake {
    pub fn new() -> Handshake {
        Handshake {
            init: [0; INIT_LEN],
            got: 0,
            stage: Stage::First,
        }
    }

    /// Reason used when the handshake deadline fires.
    pub fn timeout_reason(&self) -> CloseReason {
        CloseReason::HandshakeTimeout
    }

    /// The bytes of a TLS start that never became a whole ClientHello (a hello cut short, or on
    /// a port with other secrets a TLS-like start that is not yet 64 bytes): what the mask host
    /// gets when the handshake deadline fires. `None` for an init, or once a hello was accepted.
    fn unfinished_tls(&self) -> Option<Vec<u8>> {
        match &self.stage {
            Stage::First if self.got > 0 => Some(self.init[..self.got].to_vec()),
            Stage::InitOrBadHello => Some(self.init[..self.got].to_vec()),
            Stage::Hello { record, got } => Some(record[..*got].to_vec()),
            _ => None,
        }
    }
}

/// Classifies bytes that failed (or cannot become) an init.
fn classify_bad(prefix: &[u8]) -> CloseReason {
    if is_http(prefix) {
        CloseReason::HttpRequest
    } else if prefix.len() >= 3 && sniff::could_be_tls_record(prefix) {
        CloseReason::TlsClientHello
    } else {
        CloseReason::BadInit
    }
}

/// What the first bytes (≤ 5) of a client on a port with `ee` secrets decide.
#[derive(Debug, PartialEq, Eq)]
enum First {
    /// Not enough bytes yet.
    NeedMore,
    /// A ClientHello record of this many bytes, header included.
    Hello(usize),
    /// Read on as an obfuscated2 init (`Stage::Init` or `Stage::InitOrBadHello`).
    Init(Stage),
    /// Mask at once (every secret is `ee`).
    Mask(MaskWhy),
}

/// Decides from the first bytes `prefix` of a client on a port with `ee` secrets, `all_ee`
/// when it has no other kind.
fn first_bytes(prefix: &[u8], all_ee: bool) -> First {
    match hello::sniff(prefix) {
        Sniff::NeedMore => First::NeedMore,
        Sniff::Hello { record_len } => First::Hello(record_len),
        Sniff::Bad(_) if all_ee => First::Mask(MaskWhy::Hello(Reject::Malformed)),
        Sniff::NotTls if all_ee => First::Mask(MaskWhy::NotTls),
        Sniff::Bad(_) => First::Init(Stage::InitOrBadHello),
        Sniff::NotTls => First::Init(Stage::Init),
    }
}

/// Checks a plain init against every secret (`keys[i]` is `secrets[i]`'s key) that is not
/// `ee`: an `ee` secret is only accepted inside fake-TLS. `secret_index` is the index into
/// `secrets`.
fn accept_plain(init: &[u8; INIT_LEN], keys: &[[u8; 16]], secrets: &[Secret]) -> Option<Accepted> {
    keys.iter()
        .zip(secrets)
        .enumerate()
        .filter(|(_, (_, s))| !matches!(s.kind, SecretKind::Ee(_)))
        .find_map(|(i, (k, _))| {
            let mut a = obfs2::accept(init, std::slice::from_ref(k)).ok()?;
            a.secret_index = i;
            Some(a)
        })
}

/// What a handshake read gave.
enum Read {
    /// This many bytes.
    Got(usize),
    /// The step ends here.
    Done(Step),
}

impl Conn {
    pub(super) fn step_handshake(&mut self, ctx: &mut Ctx<'_>) -> Step {
        let Phase::Handshake(h) = &mut self.phase else {
            return Step::Wait;
        };
        match h.stage {
            Stage::First | Stage::Init | Stage::InitOrBadHello => self.step_init(ctx),
            Stage::Hello { .. } => self.step_hello(ctx),
            Stage::Answer { .. } => self.step_answer(ctx),
            Stage::TlsInit { .. } => self.step_tls_init(ctx),
        }
    }

    /// One read from the client into `init[got..want]` (`want` > `got`).
    fn read_init(&mut self, want: usize) -> Read {
        let Phase::Handshake(h) = &mut self.phase else {
            return Read::Done(Step::Wait);
        };
        if !self.client_ready.read {
            return Read::Done(Step::Wait);
        }
        match read_once(&mut self.client, &mut h.init[h.got..want]) {
            Io::Blocked => {
                self.client_ready.read = false;
                Read::Done(Step::Wait)
            }
            Io::Eof => Read::Done(Step::Close(CloseReason::HandshakeEof)),
            Io::Failed(e) => Read::Done(Step::Close(client_read_failure(&e))),
            Io::Done(n) => {
                h.got += n;
                Read::Got(h.got)
            }
        }
    }

    /// The first bytes and the init straight on TCP.
    fn step_init(&mut self, ctx: &mut Ctx<'_>) -> Step {
        let Phase::Handshake(h) = &mut self.phase else {
            return Step::Wait;
        };
        if matches!(h.stage, Stage::First) && ctx.ee_keys.is_empty() {
            h.stage = Stage::Init;
        }
        // Undecided: read no further than a record header, so a ClientHello is never over-read.
        let want = if matches!(h.stage, Stage::First) {
            RECORD_HEADER
        } else {
            INIT_LEN
        };
        let got = match self.read_init(want) {
            Read::Got(got) => got,
            Read::Done(step) => return step,
        };
        let Phase::Handshake(h) = &mut self.phase else {
            return Step::Wait;
        };
        if matches!(h.stage, Stage::First) {
            let all_ee = ctx.ee_keys.len() == ctx.cfg.secrets.len();
            match first_bytes(&h.init[..got], all_ee) {
                First::NeedMore => return Step::Progress,
                First::Hello(record_len) => {
                    // got ≤ RECORD_HEADER < record_len: the header read so far starts the record.
                    let mut record = vec![0; record_len];
                    record[..got].copy_from_slice(&h.init[..got]);
                    h.stage = Stage::Hello { record, got };
                    return Step::Progress;
                }
                First::Mask(why) => {
                    let captured = h.init[..got].to_vec();
                    return self.start_mask(why, captured, None, ctx);
                }
                First::Init(stage) => h.stage = stage,
            }
        }
        if (4..INIT_LEN).contains(&got) && is_http(&h.init[..got]) {
            return self.reject(CloseReason::HttpRequest, ctx);
        }
        if got < INIT_LEN {
            return Step::Progress;
        }
        let init = h.init;
        // Over a per-client limit no init is accepted: such a client is not ours.
        let accepted = if self.per_ip == Held::MaskSlot {
            None
        } else {
            accept_plain(&init, ctx.keys, &ctx.cfg.secrets)
        };
        match accepted {
            Some(accepted) => self.start_session(accepted, ctx),
            None if matches!(h.stage, Stage::InitOrBadHello) => {
                let why = MaskWhy::Hello(Reject::Malformed);
                self.start_mask(why, init.to_vec(), None, ctx)
            }
            None => self.reject(classify_bad(&init), ctx),
        }
    }

    /// Reads exactly the ClientHello record, then asks the gate.
    fn step_hello(&mut self, ctx: &mut Ctx<'_>) -> Step {
        let Phase::Handshake(h) = &mut self.phase else {
            return Step::Wait;
        };
        let Stage::Hello { record, got } = &mut h.stage else {
            return Step::Wait;
        };
        if !self.client_ready.read {
            return Step::Wait;
        }
        match read_once(self.client.tcp(), &mut record[*got..]) {
            Io::Blocked => {
                self.client_ready.read = false;
                return Step::Wait;
            }
            Io::Eof => return Step::Close(CloseReason::HandshakeEof),
            Io::Failed(_) => return Step::Close(CloseReason::ClientReset),
            Io::Done(n) => *got += n,
        }
        if *got < record.len() {
            return Step::Progress;
        }
        let record = std::mem::take(record);
        if self.per_ip == Held::MaskSlot {
            // Not judged (and not remembered by the replay cache): masked like a hello that is
            // not ours, whatever it is.
            let sni = hello::parse(&record)
                .ok()
                .and_then(|hello| hello.sni.map(<[u8]>::to_vec));
            return self.start_mask(MaskWhy::OverLimit, record, sni.as_deref(), ctx);
        }
        let verdict = ctx.gate.check(&record, ctx.ee_keys, ctx.wall_s, ctx.now);
        log_clock_events(ctx.gate, ctx.cfg);
        let acc = match verdict {
            Ok(acc) => acc,
            Err(why) => {
                let sni = hello::parse(&record)
                    .ok()
                    .and_then(|hello| hello.sni.map(<[u8]>::to_vec));
                debug!("client {} fake-TLS hello refused: {why}", self.peer);
                return self.start_mask(MaskWhy::Hello(why), record, sni.as_deref(), ctx);
            }
        };
        let mut answer = vec![0; MAX_SERVER_HELLO];
        let rng = &mut *ctx.rng;
        let len = server_hello(&mut answer, &acc, &mut |b| rng.fill(b));
        if len == 0 {
            // The gate's Accept always fits (session id ≤ 32); refuse rather than send nothing.
            return self.start_mask(MaskWhy::Hello(Reject::Malformed), record, None, ctx);
        }
        answer.truncate(len);
        ctx.stats.tls_accepted += 1;
        debug!(
            "client {} fake-TLS hello ok: secret #{} skew={}s{}",
            self.peer,
            acc.index,
            acc.skew_s,
            if acc.clock_trusted {
                ""
            } else {
                " (clock not trusted: not checked)"
            }
        );
        h.stage = Stage::Answer {
            answer,
            sent: 0,
            matched: Matched {
                index: acc.index,
                key: acc.key,
            },
        };
        Step::Progress
    }

    /// Writes our ServerHello, CCS and AppData records (raw, before the record layer), then
    /// switches the client to fake-TLS.
    fn step_answer(&mut self, _ctx: &mut Ctx<'_>) -> Step {
        let Phase::Handshake(h) = &mut self.phase else {
            return Step::Wait;
        };
        let Stage::Answer {
            answer,
            sent,
            matched,
        } = &mut h.stage
        else {
            return Step::Wait;
        };
        if !self.client_ready.write {
            return Step::Wait;
        }
        match write_once(self.client.tcp(), &answer[*sent..]) {
            Io::Blocked => {
                self.client_ready.write = false;
                return Step::Wait;
            }
            Io::Eof | Io::Failed(_) => return Step::Close(CloseReason::ClientReset),
            Io::Done(n) => *sent += n,
        }
        if *sent < answer.len() {
            return Step::Progress;
        }
        h.stage = Stage::TlsInit { matched: *matched };
        h.got = 0;
        self.client.start_fake_tls();
        Step::Progress
    }

    /// Reads the 64-byte init through the record layer; only the matched secret may open it.
    fn step_tls_init(&mut self, ctx: &mut Ctx<'_>) -> Step {
        let got = match self.read_init(INIT_LEN) {
            Read::Got(got) => got,
            Read::Done(step) => return step,
        };
        if got < INIT_LEN {
            return Step::Progress;
        }
        let Phase::Handshake(h) = &mut self.phase else {
            return Step::Wait;
        };
        let Stage::TlsInit { matched } = h.stage else {
            return Step::Wait;
        };
        match obfs2::accept(&h.init, &[matched.key]) {
            Ok(mut accepted) => {
                accepted.secret_index = matched.index;
                self.start_session(accepted, ctx)
            }
            Err(_) => self.reject(CloseReason::BadInit, ctx),
        }
    }

    /// The handshake deadline fired: a TLS start that never became a whole hello is masked as
    /// malformed with every byte read (a real site would still be waiting for the rest, and
    /// answers it after its own deadline); anything else closes as `handshake-timeout`.
    pub(super) fn handshake_timeout(&mut self, ctx: &mut Ctx<'_>) -> Step {
        let Phase::Handshake(h) = &self.phase else {
            return Step::Progress;
        };
        match h.unfinished_tls() {
            Some(captured) => {
                let sni = None;
                self.start_mask(MaskWhy::Hello(Reject::Malformed), captured, sni, ctx)
            }
            None => Step::Close(h.timeout_reason()),
        }
    }

    /// A valid init: checks its DC, then hands over to connecting and arms the idle timer.
    fn start_session(&mut self, accepted: Accepted, ctx: &mut Ctx<'_>) -> Step {
        let dc = match DcId::from_index(accepted.dc) {
            Ok(dc) => dc,
            Err(_) => {
                self.log_bad(
                    CloseReason::NoRoute,
                    format_args!("DC index {}", accepted.dc),
                    ctx,
                );
                return Step::Close(CloseReason::NoRoute);
            }
        };
        debug!(
            "client {} init ok: {} {} secret #{}{}",
            self.peer,
            dc,
            accepted.tag.name(),
            accepted.secret_index,
            if self.client.is_fake_tls() {
                " fake-TLS"
            } else {
                ""
            }
        );
        self.start_connecting((ClientSide::Proxy(accepted), Vec::new()), dc, ctx)
    }

    /// Hands a client whose DC is `dc` over to connecting (a proxy client's init, or a direct
    /// client's, `direct_hs`, with the bytes it already sent past them: `extra`, as sent) and
    /// arms the idle timer; a DC neither in the table nor configured is closed as `unknown-dc`.
    pub(super) fn start_connecting(
        &mut self,
        (side, extra): (ClientSide, Vec<u8>),
        dc: DcId,
        ctx: &mut Ctx<'_>,
    ) -> Step {
        if !known_dc(dc, ctx.cfg) {
            self.log_bad(
                CloseReason::UnknownDc,
                format_args!("{dc} is not a known DC"),
                ctx,
            );
            return Step::Close(CloseReason::UnknownDc);
        }
        if let Some(t) = self.timer.take() {
            ctx.wheel.cancel(t);
        }
        self.info.dc = Some(dc);
        // The freeze watch starts with the session (it is fed only once the relay runs).
        let watch = StallWatch::new(self.kept.stall(), self.started);
        let (slot, id, peer) = (self.slot, self.id, self.peer);
        self.info.meter.bytes_up += extra.len() as u64;
        let connecting = Connecting::new((side, &extra), dc, (slot, id, peer), watch, ctx);
        self.phase = Phase::Connecting(Box::new(connecting));
        let idle_at = ctx.now + self.kept.idle_ms();
        self.arm_idle(idle_at, ctx);
        Step::Progress
    }

    /// Logs a bad client once (rate-limited) and starts the bounded drain.
    fn reject(&mut self, reason: CloseReason, ctx: &mut Ctx<'_>) -> Step {
        let detail = match reason {
            _ if self.over_limit() => {
                "over a per-client limit: closed like a client that is not ours"
            }
            CloseReason::HttpRequest => "HTTP request on the MTProto port",
            CloseReason::TlsClientHello => "TLS ClientHello on the plain MTProto port",
            _ if self.client.is_fake_tls() => "init inside fake-TLS does not match its secret",
            _ => "init matches no secret (wrong secret or not MTProto)",
        };
        self.log_bad(reason, detail, ctx);
        let drain_ms = ctx.cfg.bad_client_drain.as_millis() as u64;
        if drain_ms == 0 {
            return Step::Close(reason);
        }
        self.arm(ctx.now + drain_ms, SessionTimer::Linger, ctx);
        self.phase = Phase::Draining(reason);
        Step::Progress
    }

    /// The one "bad client" line (rate-limited by `bad_log`; a suppressed one is counted).
    pub(super) fn log_bad(
        &mut self,
        reason: CloseReason,
        detail: impl std::fmt::Display,
        ctx: &mut Ctx<'_>,
    ) {
        match ctx.bad_log.allow(ctx.now) {
            Some(suppressed) => {
                let more = if suppressed > 0 {
                    format!(" ({suppressed} similar suppressed)")
                } else {
                    String::new()
                };
                warn!("bad client {}: {}: {}{}", self.peer, reason, detail, more);
            }
            None => ctx.stats.bad_suppressed += 1,
        }
    }

    /// Reads and discards until EOF, error, or the drain deadline (armed by `reject`).
    pub(super) fn step_drain(&mut self, _ctx: &mut Ctx<'_>) -> Step {
        let Phase::Draining(reason) = self.phase else {
            return Step::Wait;
        };
        if !self.client_ready.read {
            return Step::Wait;
        }
        let mut sink = [0u8; DRAIN_CHUNK];
        match read_once(&mut self.client, &mut sink) {
            Io::Done(_) => Step::Progress,
            Io::Blocked => {
                self.client_ready.read = false;
                Step::Wait
            }
            Io::Eof | Io::Failed(_) => Step::Close(reason),
        }
    }
}

/// Logs the gate's clock events, each once: the unset warning, steps, confirmation.
pub fn log_clock_events(gate: &mut Gate, cfg: &Config) {
    while let Some(ev) = gate.take_clock_event() {
        match ev {
            ClockEvent::LooksUnset { wall_s } if wall_s <= CLOCK_FLOOR => warn!(
                "system clock looks unset (before 2026-11-01): fake-TLS timestamps are not \
                 checked until it is set; the replay cache still refuses repeats (clock reads \
                 {wall_s})"
            ),
            ClockEvent::LooksUnset { .. } => warn!(
                "system clock looks unset (a valid fake-TLS hello disagreed with it by more \
                 than --tls-time-window): fake-TLS timestamps are not checked until it is set; \
                 the replay cache still refuses repeats"
            ),
            ClockEvent::Jumped { by_s } => {
                info!("system clock stepped by {by_s:+}s: fake-TLS timestamp checks re-evaluated")
            }
            ClockEvent::Confirmed => info!(
                "system clock confirmed by a fake-TLS client: hello timestamps are checked \
                 within ±{}s from now on",
                cfg.tls_time_window.as_secs()
            ),
        }
    }
}

#[cfg(test)]
mod tests;
