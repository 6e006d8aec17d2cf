//! One background probe: the full path a Telegram client would use, without a client.
//!
//! TCP → (TLS → WS upgrade) → fresh relay init → `req_pq_multi` → `resPQ` with our nonce
//! (docs/design.md §4: a Worker answers 101 before it reaches Telegram, so only `resPQ` proves
//! a route). A pool fill is the same dial stopped after the upgrade ([`Goal::Upgrade`]). The
//! ladder decides when, `route::prober` owns the slab and the deadlines; this module is the
//! state machine for one probe and never blocks. Probe traffic is tiny (one init, one 44-byte
//! packet, one reply), so it is kept in small heap buffers bounded by [`MAX_REPLY`]. WS frames are
//! built and stripped by `net::wslink`, the codec the relay uses.
//!
//! A probe with a byte goal ([`Probe::pulling`], docs/design.md §4 rule 7: the recovery probe of
//! a route that stalled) keeps up to [`PULL_BATCH`] `req_pq_multi` requests in flight, each
//! answered by a `resPQ`, until that many payload bytes came down; the deadline cuts it, and one
//! that got a `resPQ` but not its goal fails as `stalled`. Replies are decoded as they arrive,
//! so the buffers stay bounded whatever the goal.

use std::sync::Arc;

use crate::error::Failure;
use crate::mtproto::dc::DcId;
use crate::mtproto::framing::{self, Decoder};
use crate::mtproto::obfs2::{self, Cipher, Tag};
use crate::mtproto::packet;
use crate::net::dial::{Dial, DialKind, DialSpec, DialStep, Upstream};
use crate::net::io::Io;
use crate::net::wslink::{Decoder as WsDecoder, Encoder, Event, Split};
use crate::rng::Rng;

/// A probe's detail when the peer closed the connection in answer to our init and request,
/// with nothing sent back (class `closed-early`): the transport was up, so the peer heard us
/// and refused — a wrong secret at an upstream proxy, or not an MTProto server. `check`
/// names it `init-refused`.
pub const INIT_CLOSED: &str = "closed in answer to our init, nothing sent back";

/// The start of a probe's detail when the peer reset the connection in answer to our init,
/// with nothing sent back (class `reset`; the OS error follows).
pub const INIT_RESET: &str = "reset in answer to our init, nothing sent back";

/// Largest undecoded input a probe holds at once before calling the reply malformed (bytes).
pub const MAX_REPLY: usize = 16 * 1024;

/// Requests a pulling probe keeps in flight (a new batch goes out when half are answered).
/// 128 `resPQ` replies are ~11 KB: the default 32 KiB goal takes 3–4 round trips, so a
/// healthy route 400 ms away still makes it within `--probe-timeout` after its dial (32 took
/// 13 round trips, over 5 s at that distance). The batch goes out as ~7 KB.
pub const PULL_BATCH: usize = 128;

/// Outcome of a finished probe.
pub enum ProbeOutcome {
    /// `resPQ` arrived and matched; time from start in ms.
    Ok(u64),
    /// Failed with a class, an optional `Retry-After` (s) and a detail for the log.
    Failed(Failure, Option<u32>, String),
    /// A pool fill finished its upgrade: the warm upstream (no init sent yet) and the time it
    /// took in ms.
    Filled(Upstream, u64),
}

enum Phase {
    /// Boxed: a dial is ~300 bytes, the other phases a few words.
    Dialing(Box<Dial>),
    Exchanging(Upstream),
    Done,
}

/// How far a probe goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Goal {
    /// The whole path, to `resPQ` ([`ProbeOutcome::Ok`]).
    ResPq,
    /// Stop after the dial (TLS + upgrade) and hand the upstream over ([`ProbeOutcome::Filled`]).
    Upgrade,
}

/// How the probe's packets travel once dialled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    /// One binary WS message per packet.
    Ws,
    /// The raw obfuscated2 stream.
    Raw,
}

/// A probe in flight.
pub struct Probe {
    /// Route being probed (index in the route table).
    pub route: usize,
    /// Probe id (token generation, timer identity).
    pub id: u32,
    /// Start time (ms).
    pub started: u64,
    phase: Phase,
    goal: Goal,
    framing: Framing,
    dc: DcId,
    nonce: [u8; 16],
    out: Vec<u8>,
    out_sent: usize,
    raw_in: Vec<u8>,
    relay_dec: Option<Cipher>,
    relay_enc: Option<Cipher>,
    decoder: Decoder,
    /// Payload bytes to pull down before success (0 = the first `resPQ`).
    pull: usize,
    /// Payload bytes of the `resPQ` replies so far, their count, and requests sent.
    pulled: usize,
    replies: usize,
    asked: usize,
    msg_id_base: u64,
    /// The WS link's two halves (unused on raw TCP).
    ws_enc: Encoder,
    ws_dec: WsDecoder,
    /// Toward an upstream MTProto proxy: its secret key (the init is hashed with it and names
    /// the DC as a client does) and the transport its secret asks for.
    proxy: Option<([u8; 16], Tag)>,
    /// Its dial goes through the outbound proxy.
    via_proxy: bool,
}

impl Probe {
    /// A probe for route `route` over `dial` (just started for `spec`), going as far as `goal`.
    pub fn start(
        route: usize,
        id: u32,
        dc: DcId,
        spec: &DialSpec,
        dial: Dial,
        goal: Goal,
        now: u64,
    ) -> Probe {
        let framing = match spec.kind {
            DialKind::Ws { .. } => Framing::Ws,
            // No route dials bare TLS (only the shared list fetch does).
            DialKind::Tcp | DialKind::Mtproto { .. } | DialKind::Tls { .. } => Framing::Raw,
        };
        let mut probe = Probe::with_dial(route, id, dc, dial, now, goal, framing);
        if let DialKind::Mtproto { secret, .. } = &spec.kind {
            // dd and ee secrets ask clients for padded intermediate (docs/protocol.md §1.5).
            let tag = match secret.kind {
                obfs2::SecretKind::Plain => Tag::Intermediate,
                _ => Tag::PaddedIntermediate,
            };
            probe.proxy = Some((secret.key, tag));
            probe.decoder = Decoder::new(tag);
        }
        probe
    }

    /// Adopts a WS dial a client session gave up on (it lost a hedged race): it finishes in the
    /// background as a pool fill, so its outcome still teaches the route's health and a late
    /// success becomes a warm upstream. The caller re-tokens the socket.
    pub fn adopt(route: usize, id: u32, dc: DcId, dial: Dial, started: u64) -> Probe {
        Probe::with_dial(route, id, dc, dial, started, Goal::Upgrade, Framing::Ws)
    }

    fn with_dial(
        route: usize,
        id: u32,
        dc: DcId,
        dial: Dial,
        started: u64,
        goal: Goal,
        framing: Framing,
    ) -> Probe {
        let via_proxy = dial.via().is_some();
        let mut p = Probe::with_phase(
            route,
            id,
            dc,
            Phase::Dialing(Box::new(dial)),
            started,
            goal,
            framing,
        );
        p.via_proxy = via_proxy;
        p
    }

    /// A probe in `phase` with nothing sent or received yet (the one field list both a fresh
    /// dial and the unit tests' past-the-dial probe start from).
    fn with_phase(
        route: usize,
        id: u32,
        dc: DcId,
        phase: Phase,
        started: u64,
        goal: Goal,
        framing: Framing,
    ) -> Probe {
        Probe {
            route,
            id,
            started,
            phase,
            goal,
            framing,
            dc,
            nonce: [0; 16],
            out: Vec::new(),
            out_sent: 0,
            raw_in: Vec::new(),
            relay_dec: None,
            relay_enc: None,
            decoder: Decoder::new(Tag::Intermediate),
            pull: 0,
            pulled: 0,
            replies: 0,
            asked: 0,
            msg_id_base: 0,
            ws_enc: Encoder::new(Split::Packets(Tag::Intermediate)),
            ws_dec: WsDecoder::new(),
            proxy: None,
            via_proxy: false,
        }
    }

    /// True when its dial goes through the outbound proxy (`--outbound-proxy`): its outcome
    /// tells whether the proxy works.
    pub fn via_proxy(&self) -> bool {
        self.via_proxy
    }

    /// Gives a [`Goal::ResPq`] probe a byte goal: it succeeds only once `bytes` of `resPQ`
    /// payload came down (0 = the first `resPQ`, the default).
    pub fn pulling(mut self, bytes: usize) -> Probe {
        self.pull = bytes;
        self
    }

    /// Payload bytes of the `resPQ` replies received so far.
    pub fn pulled(&self) -> usize {
        self.pulled
    }

    /// How far this probe goes.
    pub fn goal(&self) -> Goal {
        self.goal
    }

    /// Takes the upstream out (to drop it and close the socket).
    pub fn take_upstream(&mut self) -> Option<Upstream> {
        match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Exchanging(up) => Some(up),
            _ => None,
        }
    }

    /// Failure to report when the probe's deadline fires: after a successful upgrade a silent
    /// upstream is "upgraded-but-silent", a hard failure; a dial whose TCP was up is a
    /// `handshake-timeout` (TLS or the upgrade stalled), one still connecting a `timeout`.
    pub fn timeout_failure(&self) -> ProbeOutcome {
        if self.pull > 0 && self.replies > 0 {
            let detail = format!("stalled after {} of {} bytes", self.pulled, self.pull);
            return ProbeOutcome::Failed(Failure::Stalled, None, detail);
        }
        let (failure, detail) = match &self.phase {
            Phase::Exchanging(_) => (Failure::Timeout, "upgraded but silent"),
            Phase::Dialing(d) => match d.timeout_failure() {
                Failure::ProxyUnreachable => (
                    Failure::ProxyUnreachable,
                    "deadline: outbound proxy not answering",
                ),
                // TCP is up: TLS or the upgrade stalled (docs/design.md §4, domain fronting).
                Failure::HandshakeTimeout => (Failure::HandshakeTimeout, "deadline in TLS/upgrade"),
                f => (f, "deadline"),
            },
            Phase::Done => (Failure::Timeout, "deadline"),
        };
        ProbeOutcome::Failed(failure, None, detail.to_string())
    }

    /// Advances on readiness at `now` (ms on the caller's monotonic clock); `wall_ms` is Unix
    /// time in ms now (the wall clock: the message ids, a dial's fake-TLS hello).
    /// `Some(outcome)` when finished.
    pub fn advance(
        &mut self,
        tls: &Arc<rustls::ClientConfig>,
        (now, wall_ms): (u64, u64),
        rng: &mut Rng,
    ) -> Option<ProbeOutcome> {
        loop {
            match &mut self.phase {
                Phase::Dialing(d) => match d.drive(tls, wall_ms / 1000, rng) {
                    DialStep::Pending => return None,
                    DialStep::Failed {
                        failure,
                        retry_after,
                        detail,
                    } => {
                        self.phase = Phase::Done;
                        return Some(ProbeOutcome::Failed(failure, retry_after, detail));
                    }
                    DialStep::Ready(up) => {
                        if self.goal == Goal::Upgrade {
                            self.phase = Phase::Done;
                            return Some(ProbeOutcome::Filled(
                                up,
                                now.saturating_sub(self.started),
                            ));
                        }
                        self.prepare(rng, wall_ms);
                        self.phase = Phase::Exchanging(up);
                    }
                },
                Phase::Exchanging(up) => {
                    let got = exchange(up, &self.out, &mut self.out_sent, &mut self.raw_in);
                    let (closed, full) = match got {
                        Ok(read) => read,
                        Err(outcome) => {
                            self.phase = Phase::Done;
                            return Some(outcome);
                        }
                    };
                    let pending = self.out.len() - self.out_sent;
                    let checked = self.check_reply(rng);
                    // Requests (or a pong) queued by the replies go out now: no writable edge
                    // comes for a socket that was writable all along.
                    let queued = self.out.len() - self.out_sent > pending;
                    if checked == Ok(false) && queued && !closed {
                        continue;
                    }
                    if checked == Ok(false) && full {
                        if self.raw_in.len() >= MAX_REPLY {
                            self.phase = Phase::Done;
                            let detail = "reply too large".to_string();
                            return Some(ProbeOutcome::Failed(Failure::ClosedEarly, None, detail));
                        }
                        // Stopped reading at the bound: decode, then read on.
                        continue;
                    }
                    match checked {
                        Ok(true) => {
                            self.phase = Phase::Done;
                            return Some(ProbeOutcome::Ok(now.saturating_sub(self.started)));
                        }
                        Ok(false) if closed => {
                            self.phase = Phase::Done;
                            let detail = "closed after a partial reply".to_string();
                            return Some(ProbeOutcome::Failed(Failure::ClosedEarly, None, detail));
                        }
                        Ok(false) => return None,
                        Err((failure, detail)) => {
                            self.phase = Phase::Done;
                            return Some(ProbeOutcome::Failed(failure, None, detail));
                        }
                    }
                }
                Phase::Done => return None,
            }
        }
    }

    /// Builds the relay init and the first `req_pq_multi` packet(s) (each its own WS message),
    /// their message ids from `unix_ms` (Unix time in ms).
    fn prepare(&mut self, rng: &mut Rng, unix_ms: u64) {
        let init = match self.proxy {
            Some((key, tag)) => {
                let dc = crate::mtproto::upstream::client_index(self.dc);
                obfs2::initiate(tag, dc, Some(&key), rng)
            }
            None => obfs2::initiate(Tag::Intermediate, self.dc.relay_index(), None, rng),
        };
        self.relay_enc = Some(init.encrypt);
        self.relay_dec = Some(init.decrypt);
        rng.fill(&mut self.nonce);
        self.msg_id_base = packet::msg_id(unix_ms);
        if self.framing == Framing::Ws {
            self.ws_enc.push_message(&mut self.out, &init.init, rng);
        } else {
            self.out.extend_from_slice(&init.init);
        }
        self.ask(if self.pull > 0 { PULL_BATCH } else { 1 }, rng);
    }

    /// Queues `n` more `req_pq_multi` requests (message ids 4 apart, as a client's are).
    fn ask(&mut self, n: usize, rng: &mut Rng) {
        let Some(enc) = self.relay_enc.as_mut() else {
            return;
        };
        if self.out_sent == self.out.len() {
            self.out.clear();
            self.out_sent = 0;
        }
        for _ in 0..n {
            let msg_id = self.msg_id_base + 4 * self.asked as u64;
            self.asked += 1;
            let msg = packet::req_pq_multi(&self.nonce, msg_id);
            let tag = self.proxy.map_or(Tag::Intermediate, |(_, tag)| tag);
            let mut pkt = framing::encode(tag, &msg, rng);
            enc.apply(&mut pkt);
            if self.framing == Framing::Ws {
                self.ws_enc.push_message(&mut self.out, &pkt, rng);
            } else {
                self.out.extend_from_slice(&pkt);
            }
        }
    }

    /// Decodes what arrived (answering WS pings on the next write); `Ok(true)` when a matching
    /// `resPQ` is in.
    fn check_reply(&mut self, rng: &mut Rng) -> Result<bool, (Failure, String)> {
        let Some(dec) = self.relay_dec.as_mut() else {
            return Ok(false);
        };
        if self.framing == Framing::Ws {
            // Strip frame headers, answer pings; a partial header waits for more.
            let mut at = 0;
            loop {
                match self.ws_dec.next(&self.raw_in[at..], &mut self.ws_enc) {
                    Err(e) => return Err((Failure::ClosedEarly, format!("bad WS frame: {e}"))),
                    Ok(Event::NeedMore) => break,
                    Ok(Event::Header(n) | Event::Control(n) | Event::AfterClose(n)) => at += n,
                    Ok(Event::Payload(n)) => {
                        let payload = &mut self.raw_in[at..at + n];
                        dec.apply(payload);
                        self.decoder.push(payload);
                        at += n;
                    }
                    // A close before any reply: the front refused what we sent.
                    Ok(Event::Closed(..)) if self.replies == 0 => {
                        return Err((Failure::ClosedEarly, format!("{INIT_CLOSED} (WS close)")))
                    }
                    Ok(Event::Closed(..)) => {
                        return Err((Failure::ClosedEarly, "WS close before resPQ".into()))
                    }
                }
            }
            self.raw_in.drain(..at);
            self.ws_enc.push_control(&mut self.out, rng);
        } else {
            let mut data = std::mem::take(&mut self.raw_in);
            dec.apply(&mut data);
            self.decoder.push(&data);
        }
        loop {
            match self.decoder.next() {
                Ok(Some(msg)) => {
                    // A transport error code (-429 flood, -444 wrong DC, ...) is the DC's own
                    // answer, not a sign that what came down is not MTProto (docs/protocol.md
                    // §3.7, as `relay::reply` lets it pass): soft, as a close before resPQ.
                    if msg.len() < crate::relay::reply::SHORTEST_MESSAGE as usize {
                        let code = <[u8; 4]>::try_from(&msg[..msg.len().min(4)])
                            .map_or(String::from("?"), |b| i32::from_le_bytes(b).to_string());
                        return Err((
                            Failure::ClosedEarly,
                            format!("transport error {code} instead of resPQ"),
                        ));
                    }
                    // What came down is not the answer: not MTProto (`relay::reply`'s class).
                    if let Err(e) = packet::parse_res_pq(&msg, &self.nonce) {
                        return Err((Failure::BadReply, format!("bad resPQ: {e}")));
                    }
                    self.replies += 1;
                    self.pulled += msg.len();
                    if self.pulled >= self.pull {
                        return Ok(true);
                    }
                }
                Ok(None) => break,
                Err(e) => return Err((Failure::BadReply, format!("bad transport packet: {e}"))),
            }
        }
        if self.pull > 0 && self.asked - self.replies <= PULL_BATCH / 2 {
            self.ask(PULL_BATCH, rng);
        }
        Ok(false)
    }
}

/// Writes what is pending and reads what arrived (non-blocking), until `WouldBlock` or
/// [`MAX_REPLY`] bytes are held. `Ok((closed, full))`: the peer has closed (what arrived is
/// all there will be); reading stopped at the bound (decode, then call again).
fn exchange(
    up: &mut Upstream,
    out: &[u8],
    sent: &mut usize,
    raw_in: &mut Vec<u8>,
) -> Result<(bool, bool), ProbeOutcome> {
    if up.has_backlog() {
        let _ = up.flush();
    }
    while *sent < out.len() {
        match up.write(&out[*sent..]) {
            Io::Done(n) => *sent += n,
            Io::Blocked => break,
            Io::Eof | Io::Failed(_) => {
                return Err(ProbeOutcome::Failed(
                    Failure::Reset,
                    None,
                    "reset while sending".into(),
                ))
            }
        }
    }
    let mut buf = [0u8; 4096];
    loop {
        if raw_in.len() + buf.len() > MAX_REPLY {
            return Ok((false, true));
        }
        match up.read(&mut buf) {
            Io::Done(n) => raw_in.extend_from_slice(&buf[..n]),
            Io::Blocked => return Ok((false, false)),
            Io::Eof => {
                // Let the caller parse what came; a complete resPQ still counts.
                if raw_in.is_empty() {
                    return Err(ProbeOutcome::Failed(
                        Failure::ClosedEarly,
                        None,
                        INIT_CLOSED.into(),
                    ));
                }
                return Ok((true, false));
            }
            Io::Failed(e) if raw_in.is_empty() => {
                let detail = format!("{INIT_RESET}: {e}");
                return Err(ProbeOutcome::Failed(Failure::Reset, None, detail));
            }
            Io::Failed(e) => return Err(ProbeOutcome::Failed(Failure::Reset, None, e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mtproto::obfs2::Accepted;

    /// A raw-TCP probe toward DC 2 with byte goal `pull`, past its dial (sans-IO: the test
    /// plays the DC on the probe's buffers).
    fn probe(pull: usize) -> Probe {
        let mut p = Probe::with_phase(
            0,
            1,
            DcId::plain(2),
            Phase::Done,
            0,
            Goal::ResPq,
            Framing::Raw,
        )
        .pulling(pull);
        p.prepare(&mut Rng::from_seed([3; 48]), WALL_MS);
        p
    }

    /// The wall clock the tests' probes are stamped with (Unix ms).
    const WALL_MS: u64 = 1_700_000_000_123;

    /// The DC side: reads what the probe queued since `*seen` and answers every
    /// `req_pq_multi` with a `resPQ` into the probe's input. Returns the requests answered.
    fn answer(p: &mut Probe, dc: &mut Option<(Accepted, Decoder)>, seen: &mut usize) -> usize {
        let rng = &mut Rng::from_seed([4; 48]);
        if dc.is_none() {
            let init: [u8; 64] = p.out[..64].try_into().unwrap();
            let a = obfs2::accept_raw(&init).expect("the probe's init");
            *dc = Some((a, Decoder::new(Tag::Intermediate)));
            *seen = 64;
        }
        let (a, dec) = dc.as_mut().unwrap();
        let mut data = p.out[*seen..].to_vec();
        *seen = p.out.len();
        a.decrypt.apply(&mut data);
        dec.push(&data);
        let mut n = 0;
        while let Some(req) = dec.next().unwrap() {
            let nonce = packet::parse_req_pq_multi(&req).expect("a req_pq_multi");
            let mut w =
                framing::encode(Tag::Intermediate, &packet::res_pq(&nonce, &[5; 16], 1), rng);
            a.encrypt.apply(&mut w);
            p.raw_in.extend_from_slice(&w);
            n += 1;
        }
        n
    }

    #[test]
    fn a_probe_toward_an_upstream_proxy_hashes_its_key_and_names_the_dc_as_a_client() {
        let key = [0x42u8; 16];
        let test_media = DcId::from_index(-10002).unwrap();
        let mut p = Probe::with_phase(0, 1, test_media, Phase::Done, 0, Goal::ResPq, Framing::Raw);
        p.proxy = Some((key, Tag::PaddedIntermediate));
        p.decoder = Decoder::new(Tag::PaddedIntermediate);
        p.prepare(&mut Rng::from_seed([3; 48]), WALL_MS);
        // The message ids come from the wall clock given, not the machine's.
        assert_eq!(p.msg_id_base, packet::msg_id(WALL_MS));
        let init: [u8; 64] = p.out[..64].try_into().unwrap();
        let mut a = obfs2::accept(&init, &[key]).expect("the upstream's side decodes it");
        assert_eq!((a.tag, a.dc), (Tag::PaddedIntermediate, -10002));
        // The upstream answers the request in padded intermediate.
        let mut data = p.out[64..].to_vec();
        a.decrypt.apply(&mut data);
        let mut dec = Decoder::new(Tag::PaddedIntermediate);
        dec.push(&data);
        let req = dec.next().unwrap().expect("one request");
        let nonce = packet::parse_req_pq_multi(&req).expect("a req_pq_multi");
        let rng = &mut Rng::from_seed([4; 48]);
        let res = packet::res_pq(&nonce, &[5; 16], 1);
        let mut w = framing::encode(Tag::PaddedIntermediate, &res, rng);
        a.encrypt.apply(&mut w);
        p.raw_in.extend_from_slice(&w);
        assert_eq!(p.check_reply(rng), Ok(true));
    }

    #[test]
    fn a_plain_probe_asks_once_and_succeeds_on_the_first_res_pq() {
        let mut p = probe(0);
        let (mut dc, mut seen) = (None, 0);
        assert_eq!(answer(&mut p, &mut dc, &mut seen), 1);
        assert_eq!(p.check_reply(&mut Rng::from_seed([6; 48])), Ok(true));
        assert_eq!((p.asked, p.replies), (1, 1));
    }

    #[test]
    fn a_pulling_probe_keeps_asking_until_its_byte_goal_came_down() {
        let goal = 32 * 1024;
        let mut p = probe(goal);
        let rng = &mut Rng::from_seed([6; 48]);
        let (mut dc, mut seen) = (None, 0);
        assert_eq!(p.asked, PULL_BATCH, "a batch in flight from the start");
        let mut rounds = 0;
        loop {
            rounds += 1;
            assert!(rounds < 1_000, "never reached the goal: {}", p.pulled());
            let answered = answer(&mut p, &mut dc, &mut seen);
            assert!(
                answered > 0,
                "the probe stopped asking at {} bytes",
                p.pulled()
            );
            if p.check_reply(rng).unwrap() {
                break;
            }
            assert!(p.pulled() < goal);
            assert!(
                p.asked - p.replies <= PULL_BATCH + PULL_BATCH / 2,
                "bounded in flight"
            );
        }
        assert!(p.pulled() >= goal, "{}", p.pulled());
        assert!(p.replies > goal / 128, "many resPQ replies: {}", p.replies);
        assert!(
            p.raw_in.is_empty() && p.out.len() < 64 + 2 * goal,
            "buffers stay bounded"
        );
    }

    #[test]
    fn a_pulling_probe_reaches_the_default_goal_in_a_few_round_trips() {
        // Each round the DC answers everything in flight: one round trip. A healthy route
        // 400 ms away (a Worker in front of Telegram, seen from a censored network) spends
        // ~4 round trips on the dial; the pull must fit the rest of --probe-timeout (5 s), or
        // a thawed route stays down as "stalled" for good.
        let goal = 32 * 1024;
        let mut p = probe(goal);
        let rng = &mut Rng::from_seed([6; 48]);
        let (mut dc, mut seen) = (None, 0);
        let mut rounds = 0;
        loop {
            rounds += 1;
            assert!(rounds <= 100, "never reached the goal: {}", p.pulled());
            answer(&mut p, &mut dc, &mut seen);
            if p.check_reply(rng).unwrap() {
                break;
            }
        }
        assert!(rounds <= 4, "{rounds} round trips for {goal} bytes");
    }

    #[test]
    fn a_pulling_probe_cut_by_its_deadline_after_a_res_pq_is_stalled() {
        let mut p = probe(32 * 1024);
        let (mut dc, mut seen) = (None, 0);
        answer(&mut p, &mut dc, &mut seen);
        assert_eq!(p.check_reply(&mut Rng::from_seed([6; 48])), Ok(false));
        // The freeze: nothing more comes down; the deadline fires.
        match p.timeout_failure() {
            ProbeOutcome::Failed(f, None, detail) => {
                assert_eq!(f, Failure::Stalled, "{detail}");
                assert!(detail.contains("of 32768 bytes"), "{detail}");
            }
            _ => panic!("not a failure"),
        }
        // Without any resPQ it is the plain deadline.
        let p = probe(32 * 1024);
        assert!(matches!(
            p.timeout_failure(),
            ProbeOutcome::Failed(Failure::Timeout, ..)
        ));
    }

    #[test]
    fn a_transport_error_code_is_mtproto_not_a_bad_reply() {
        // Review finding: a DC that answers the probe with a transport error code (-429 when
        // it throttles this address, -444 for a DC it does not serve) failed the route as
        // `bad-reply` ("not MTProto", hard), where the relay's own check lets an error code
        // pass (docs/protocol.md §3.7): it is the DC's answer, and it was a soft failure before.
        for code in [-429i32, -444, -404] {
            let mut p = probe(0);
            let init: [u8; 64] = p.out[..64].try_into().unwrap();
            let mut a = obfs2::accept_raw(&init).expect("the probe's init");
            let rng = &mut Rng::from_seed([4; 48]);
            let mut w = framing::encode(Tag::Intermediate, &code.to_le_bytes(), rng);
            a.encrypt.apply(&mut w);
            p.raw_in.extend_from_slice(&w);
            match p.check_reply(rng) {
                Err((f, detail)) => {
                    assert_eq!(f, Failure::ClosedEarly, "{code}: {detail}");
                    assert!(detail.contains(&code.to_string()), "{detail}");
                }
                other => panic!("{code}: {other:?}"),
            }
        }
    }
}
