//! One background probe: the full path a Telegram client would use, without a client.
//!
//! TCP → (TLS → WS upgrade) → fresh relay init → `req_pq_multi` → `resPQ` with our nonce
//! (docs/design.md §4: a Worker answers 101 before it reaches Telegram, so only `resPQ` proves
//! a route). A pool fill is the same dial stopped after the upgrade ([`Goal::Upgrade`]). The
//! ladder decides when, `route::prober` owns the slab and the deadlines; this module is the
//! state machine for one probe and never blocks. Probe traffic is tiny (one init, one 44-byte
//! packet, one reply), so it is kept in small heap buffers bounded by [`MAX_REPLY`]. WS frames are
//! built and stripped by `net::wslink`, the codec the relay uses.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use mio::{Registry, Token};

use crate::error::Failure;
use crate::mtproto::dc::DcId;
use crate::mtproto::framing::{self, Decoder};
use crate::mtproto::obfs2::{self, Cipher, Tag};
use crate::mtproto::packet;
use crate::net::dial::{Dial, DialKind, DialSpec, DialStep, Upstream};
use crate::net::io::Io;
use crate::net::wslink::{Decoder as WsDecoder, Encoder, Event, Split};
use crate::rng::Rng;

/// Largest reply a probe accepts before calling it malformed (bytes).
pub const MAX_REPLY: usize = 16 * 1024;

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
    Dialing(Dial),
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
    decoder: Decoder,
    /// The WS link's two halves (unused on raw TCP).
    ws_enc: Encoder,
    ws_dec: WsDecoder,
}

impl Probe {
    /// Starts dialling `spec` for route `route`, going as far as `goal`.
    ///
    /// Errors: the socket could not be created or registered (`Failure::Local`, or the connect
    /// error's class).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        route: usize,
        id: u32,
        dc: DcId,
        spec: &DialSpec,
        goal: Goal,
        registry: &Registry,
        token: Token,
        now: u64,
    ) -> Result<Probe, Failure> {
        let dial = Dial::start(spec, registry, token, std::time::Duration::ZERO)?;
        let framing = match spec.kind {
            DialKind::Ws { .. } => Framing::Ws,
            DialKind::Tcp => Framing::Raw,
        };
        Ok(Probe::with_dial(route, id, dc, dial, now, goal, framing))
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
        Probe {
            route,
            id,
            started,
            phase: Phase::Dialing(dial),
            goal,
            framing,
            dc,
            nonce: [0; 16],
            out: Vec::new(),
            out_sent: 0,
            raw_in: Vec::new(),
            relay_dec: None,
            decoder: Decoder::new(Tag::Intermediate),
            ws_enc: Encoder::new(Split::Packets(Tag::Intermediate)),
            ws_dec: WsDecoder::new(),
        }
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
    /// upstream is "upgraded-but-silent", a hard failure.
    pub fn timeout_failure(&self) -> ProbeOutcome {
        let detail = if matches!(self.phase, Phase::Exchanging(_)) {
            "upgraded but silent"
        } else {
            "deadline"
        };
        ProbeOutcome::Failed(Failure::Timeout, None, detail.to_string())
    }

    /// Advances on readiness. `Some(outcome)` when finished.
    pub fn advance(
        &mut self,
        tls: &Arc<rustls::ClientConfig>,
        now: u64,
        rng: &mut Rng,
    ) -> Option<ProbeOutcome> {
        loop {
            match &mut self.phase {
                Phase::Dialing(d) => match d.drive(tls) {
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
                        self.prepare(rng);
                        self.phase = Phase::Exchanging(up);
                    }
                },
                Phase::Exchanging(up) => {
                    let closed = match exchange(up, &self.out, &mut self.out_sent, &mut self.raw_in)
                    {
                        Ok(closed) => closed,
                        Err(outcome) => {
                            self.phase = Phase::Done;
                            return Some(outcome);
                        }
                    };
                    match self.check_reply(rng) {
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
                        Err(detail) => {
                            self.phase = Phase::Done;
                            return Some(ProbeOutcome::Failed(Failure::ClosedEarly, None, detail));
                        }
                    }
                }
                Phase::Done => return None,
            }
        }
    }

    /// Builds the relay init and the `req_pq_multi` packet (each its own WS message).
    fn prepare(&mut self, rng: &mut Rng) {
        let init = obfs2::initiate(Tag::Intermediate, self.dc.relay_index(), None, rng);
        let mut enc = init.encrypt;
        self.relay_dec = Some(init.decrypt);
        rng.fill(&mut self.nonce);
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let msg = packet::req_pq_multi(&self.nonce, packet::msg_id(unix_ms));
        let mut pkt = framing::encode(Tag::Intermediate, &msg, rng);
        enc.apply(&mut pkt);
        if self.framing == Framing::Ws {
            self.ws_enc.push_message(&mut self.out, &init.init, rng);
            self.ws_enc.push_message(&mut self.out, &pkt, rng);
        } else {
            self.out.extend_from_slice(&init.init);
            self.out.extend_from_slice(&pkt);
        }
    }

    /// Decodes what arrived (answering WS pings on the next write); `Ok(true)` when a matching
    /// `resPQ` is in.
    fn check_reply(&mut self, rng: &mut Rng) -> Result<bool, String> {
        let Some(dec) = self.relay_dec.as_mut() else {
            return Ok(false);
        };
        if self.framing == Framing::Ws {
            // Strip frame headers, answer pings; a partial header waits for more.
            let mut at = 0;
            loop {
                match self.ws_dec.next(&self.raw_in[at..], &mut self.ws_enc) {
                    Err(e) => return Err(format!("bad WS frame: {e}")),
                    Ok(Event::NeedMore) => break,
                    Ok(Event::Header(n) | Event::Control(n) | Event::AfterClose(n)) => at += n,
                    Ok(Event::Payload(n)) => {
                        let payload = &mut self.raw_in[at..at + n];
                        dec.apply(payload);
                        self.decoder.push(payload);
                        at += n;
                    }
                    Ok(Event::Closed(..)) => return Err("WS close before resPQ".into()),
                }
            }
            self.raw_in.drain(..at);
            self.ws_enc.push_control(&mut self.out, rng);
        } else {
            let mut data = std::mem::take(&mut self.raw_in);
            dec.apply(&mut data);
            self.decoder.push(&data);
        }
        match self.decoder.next() {
            Ok(Some(msg)) => match packet::parse_res_pq(&msg, &self.nonce) {
                Ok(_) => Ok(true),
                Err(e) => Err(format!("bad resPQ: {e}")),
            },
            Ok(None) => Ok(false),
            Err(e) => Err(format!("bad transport packet: {e}")),
        }
    }
}

/// Writes what is pending and reads what arrived (non-blocking).
/// `Ok(true)` when the peer has closed (what arrived is all there will be).
fn exchange(
    up: &mut Upstream,
    out: &[u8],
    sent: &mut usize,
    raw_in: &mut Vec<u8>,
) -> Result<bool, ProbeOutcome> {
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
        match up.read(&mut buf) {
            Io::Done(n) => {
                if raw_in.len() + n > MAX_REPLY {
                    return Err(ProbeOutcome::Failed(
                        Failure::ClosedEarly,
                        None,
                        "reply too large".into(),
                    ));
                }
                raw_in.extend_from_slice(&buf[..n]);
            }
            Io::Blocked => return Ok(false),
            Io::Eof => {
                // Let the caller parse what came; a complete resPQ still counts.
                if raw_in.is_empty() {
                    return Err(ProbeOutcome::Failed(
                        Failure::ClosedEarly,
                        None,
                        "closed before resPQ".into(),
                    ));
                }
                return Ok(true);
            }
            Io::Failed(e) => return Err(ProbeOutcome::Failed(Failure::Reset, None, e.to_string())),
        }
    }
}
