//! Relay core over in-memory pipes: a fake Telegram app on one side, a fake DC / WS front on
//! the other, both with real obfuscated2 ciphers, so every assertion is about bytes delivered
//! intact after double re-encryption, what went on the wire, and why the session ended. This
//! file is the rig; the tests are its children (`flow`: payload over each link kind).

use std::collections::VecDeque;
use std::io::Read;

mod buffers;
mod edges;
mod ends;
mod flow;
mod modes;
mod proxy;
mod replay;

use super::pipe::{pair, push, PipeEnd};
use super::*;
use crate::buf::BufPool;
use crate::mtproto::obfs2::{accept, accept_raw, initiate, Tag};
use crate::net::wsframe::{apply_mask, format_header, parse_header, Header, Opcode, MAX_HEADER};
use crate::net::wslink;

const SECRET: [u8; 16] = [0x11; 16];
/// Steps of the rig before a test calls it stuck.
const MAX_ROUNDS: usize = 100_000;

/// One frame as the front saw it (payload unmasked, still relay-encrypted for binary).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    opcode: Opcode,
    len: usize,
    payload: Vec<u8>,
}

struct Rig {
    relay: Relay,
    kind: LinkKind,
    /// The relay's ends.
    client: PipeEnd,
    up: PipeEnd,
    cr: Ready,
    ur: Ready,
    meter: Meter,
    scratch: Scratch,
    rng: Rng,
    now: u64,
    /// The fake Telegram app.
    app: PipeEnd,
    app_enc: Cipher,
    app_dec: Cipher,
    app_out: VecDeque<u8>,
    app_in: Vec<u8>,
    app_shut_pending: bool,
    /// The app speaks a plain transport (no cipher: `modes.rs`).
    app_plain: bool,
    /// What the app wrote and read on the wire (ciphertext unless plain).
    app_wire_out: Vec<u8>,
    app_wire_in: Vec<u8>,
    /// Payload bytes after the init as the front received them (unmasked, still encrypted),
    /// and the payload bytes it sent (encrypted, no WS headers).
    front_wire_in: Vec<u8>,
    front_wire_out: Vec<u8>,
    /// The fake front / DC.
    front: PipeEnd,
    front_enc: Option<Cipher>,
    front_dec: Option<Cipher>,
    front_raw: Vec<u8>,
    front_out: VecDeque<u8>,
    front_shut_pending: bool,
    /// Client plaintext the front decoded, and the frames it saw (after the init).
    front_plain: Vec<u8>,
    frames: Vec<Seen>,
    closed: Option<CloseReason>,
}

impl Rig {
    /// `client_cap` / `up_cap`: pipe capacity per direction; `buf`: each relay buffer.
    fn new(kind: LinkKind, client_cap: usize, up_cap: usize, buf: usize) -> Rig {
        let bufs = (RelayBuf::new(buf), RelayBuf::new(buf));
        Rig::build(kind, client_cap, up_cap, bufs, Scratch::new(4 * buf, None))
    }

    /// Own buffers from `pool` (its block size), and a scratch of 4 blocks unless `plain`.
    fn pooled(
        kind: LinkKind,
        client_cap: usize,
        up_cap: usize,
        pool: &BufPool,
        plain: bool,
    ) -> Rig {
        let bufs = (RelayBuf::pooled(pool), RelayBuf::pooled(pool));
        let cap = if plain { 1 } else { 4 * pool.block_len() };
        Rig::build(
            kind,
            client_cap,
            up_cap,
            bufs,
            Scratch::new(cap, Some(pool.clone())),
        )
    }

    fn build(
        kind: LinkKind,
        client_cap: usize,
        up_cap: usize,
        bufs: (RelayBuf, RelayBuf),
        scratch: Scratch,
    ) -> Rig {
        let mut rng = Rng::from_seed([42; 48]);
        let app_init = initiate(Tag::Intermediate, 2, Some(&SECRET), &mut rng);
        let accepted = accept(&app_init.init, &[SECRET]).expect("app init accepted");
        let mut relay = Relay::new(accepted, 2, kind, bufs.0, bufs.1, false, &mut rng);
        // These tests move arbitrary bytes down; `reply`'s own tests judge the framing.
        relay.trust_replies();
        let (client, app) = pair(client_cap, client_cap);
        let (up, front) = pair(up_cap, up_cap);
        Rig {
            relay,
            kind,
            client,
            up,
            cr: Ready::default(),
            ur: Ready::default(),
            meter: Meter::default(),
            scratch,
            rng,
            now: 1_000,
            app,
            app_enc: app_init.encrypt,
            app_dec: app_init.decrypt,
            app_out: VecDeque::new(),
            app_in: Vec::new(),
            app_shut_pending: false,
            app_plain: false,
            app_wire_out: Vec::new(),
            app_wire_in: Vec::new(),
            front_wire_in: Vec::new(),
            front_wire_out: Vec::new(),
            front,
            front_enc: None,
            front_dec: None,
            front_raw: Vec::new(),
            front_out: VecDeque::new(),
            front_shut_pending: false,
            front_plain: Vec::new(),
            frames: Vec::new(),
            closed: None,
        }
    }

    /// Without the scratch's large buffer: every byte goes through the session's own buffers.
    fn plain(mut self) -> Rig {
        self.scratch = Scratch::new(1, None);
        self
    }

    fn ws(&self) -> bool {
        self.kind != LinkKind::Raw
    }

    /// The app sends `plain` (encrypted with its cipher).
    fn app_send(&mut self, plain: &[u8]) {
        let mut c = plain.to_vec();
        if !self.app_plain {
            self.app_enc.apply(&mut c);
        }
        self.app_wire_out.extend_from_slice(&c);
        self.app_out.extend(c);
    }

    /// The app half-closes once everything queued is written.
    fn app_shut(&mut self) {
        self.app_shut_pending = true;
    }

    /// The front sends `plain` as one binary frame (WS) or raw.
    fn front_data(&mut self, plain: &[u8]) {
        let mut c = plain.to_vec();
        self.front_enc.as_mut().expect("init seen").apply(&mut c);
        self.front_wire_out.extend_from_slice(&c);
        if self.ws() {
            self.front_frame(0x82, &c);
        } else {
            self.front_out.extend(c);
        }
    }

    /// The front sends a frame with first byte `b0` (FIN, RSV, opcode), unmasked.
    fn front_frame(&mut self, b0: u8, payload: &[u8]) {
        let h = Header {
            fin: true,
            opcode: Opcode::Binary,
            mask: None,
            len: payload.len() as u64,
        };
        let mut hdr = [0u8; MAX_HEADER];
        let n = format_header(&h, &mut hdr);
        hdr[0] = b0;
        self.front_out.extend(&hdr[..n]);
        self.front_out.extend(payload);
    }

    fn front_shut(&mut self) {
        self.front_shut_pending = true;
    }

    /// Moves queued test bytes into the pipes and takes what arrived; true on any movement.
    fn pump_peers(&mut self) -> bool {
        let mut moved = false;
        moved |= push(&mut self.app, &mut self.app_out);
        if self.app_shut_pending && self.app_out.is_empty() {
            self.app_shut_pending = false;
            let _ = self.app.shutdown_write();
            moved = true;
        }
        moved |= push(&mut self.front, &mut self.front_out);
        if self.front_shut_pending && self.front_out.is_empty() {
            self.front_shut_pending = false;
            let _ = self.front.shutdown_write();
            moved = true;
        }
        let mut buf = [0u8; 8192];
        while let Ok(n @ 1..) = self.app.read(&mut buf) {
            let mut c = buf[..n].to_vec();
            self.app_wire_in.extend_from_slice(&c);
            if !self.app_plain {
                self.app_dec.apply(&mut c);
            }
            self.app_in.extend(c);
            moved = true;
        }
        while let Ok(n @ 1..) = self.front.read(&mut buf) {
            self.front_raw.extend_from_slice(&buf[..n]);
            moved = true;
        }
        self.parse_front();
        moved
    }

    /// Decodes what the relay sent upstream: the init first, then frames or the raw stream.
    fn parse_front(&mut self) {
        loop {
            if !self.ws() {
                if self.front_dec.is_none() {
                    if self.front_raw.len() < 64 {
                        return;
                    }
                    let init: Vec<u8> = self.front_raw.drain(..64).collect();
                    self.take_init(&init);
                }
                let mut rest = std::mem::take(&mut self.front_raw);
                self.front_wire_in.extend_from_slice(&rest);
                self.front_dec.as_mut().unwrap().apply(&mut rest);
                self.front_plain.extend(rest);
                return;
            }
            let Ok(Some((h, hl))) = parse_header(&self.front_raw) else {
                return;
            };
            let end = hl + h.len as usize;
            if self.front_raw.len() < end {
                return;
            }
            let mask = h.mask.expect("client frames are masked");
            let mut payload: Vec<u8> = self.front_raw[hl..end].to_vec();
            self.front_raw.drain(..end);
            apply_mask(&mut payload, mask, 0);
            if self.front_dec.is_none() {
                assert_eq!(
                    (h.opcode, payload.len()),
                    (Opcode::Binary, 64),
                    "init first"
                );
                self.take_init(&payload);
                continue;
            }
            if h.opcode == Opcode::Binary {
                self.front_wire_in.extend_from_slice(&payload);
                self.front_dec.as_mut().unwrap().apply(&mut payload);
                self.front_plain.extend_from_slice(&payload);
            }
            self.frames.push(Seen {
                opcode: h.opcode,
                len: payload.len(),
                payload,
            });
        }
    }

    fn take_init(&mut self, init: &[u8]) {
        let mut a = [0u8; 64];
        a.copy_from_slice(init);
        let acc = accept_raw(&a).expect("relay init parses");
        assert_eq!((acc.tag, acc.dc), (Tag::Intermediate, 2));
        self.front_dec = Some(acc.decrypt);
        self.front_enc = Some(acc.encrypt);
    }

    /// One relay step with the readiness flags as they stand in `cr` / `ur`; the peers are not
    /// pumped.
    fn step(&mut self) -> Outcome {
        self.relay.step(
            &mut self.client,
            &mut self.cr,
            &mut self.up,
            &mut self.ur,
            &mut self.meter,
            &mut self.scratch,
            self.now,
            &mut self.rng,
        )
    }

    /// One relay step with every pipe counted as ready (the relay clears a flag on
    /// WouldBlock); the peers are not pumped.
    fn step_ready(&mut self) -> Outcome {
        self.cr = Ready {
            read: true,
            write: true,
        };
        self.ur = self.cr;
        self.step()
    }

    /// Runs relay and peers until neither moves, or the relay closes. Returns the close reason.
    fn run(&mut self) -> Option<CloseReason> {
        self.settle(false)
    }

    /// The loop behind [`Rig::run`]: every pipe counted as ready each round, or, with `edges`,
    /// readiness set only by what the peers did (`edges.rs`).
    fn settle(&mut self, edges: bool) -> Option<CloseReason> {
        for _ in 0..MAX_ROUNDS {
            if self.closed.is_some() {
                return self.closed;
            }
            let (peers, outcome) = if edges {
                let peers = self.pump_peers_edges();
                (peers, self.step())
            } else {
                let peers = self.pump_peers();
                (peers, self.step_ready())
            };
            match outcome {
                Outcome::Close(r) => {
                    self.closed = Some(r);
                    self.pump_peers();
                    return self.closed;
                }
                Outcome::Progress => {}
                Outcome::Wait if !peers => return None,
                Outcome::Wait => {}
            }
        }
        panic!("relay did not settle in {MAX_ROUNDS} rounds");
    }

    /// The binary messages the front saw, as decrypted packets.
    fn front_messages(&self) -> Vec<Vec<u8>> {
        // Re-derive the plaintext per message: the front's cipher ran over them in order.
        let mut out = Vec::new();
        let mut at = 0;
        for f in self.frames.iter().filter(|f| f.opcode == Opcode::Binary) {
            out.push(self.front_plain[at..at + f.len].to_vec());
            at += f.len;
        }
        out
    }

    fn controls(&self) -> Vec<(Opcode, Vec<u8>)> {
        self.frames
            .iter()
            .filter(|f| f.opcode != Opcode::Binary)
            .map(|f| (f.opcode, f.payload.clone()))
            .collect()
    }
}

impl Rig {
    /// Like `pump_peers` but the app reads nothing (a stalled client).
    fn pump_peers_front_only(&mut self) {
        push(&mut self.front, &mut self.front_out);
        if self.front_shut_pending && self.front_out.is_empty() {
            self.front_shut_pending = false;
            let _ = self.front.shutdown_write();
        }
        let mut buf = [0u8; 8192];
        while let Ok(n @ 1..) = self.front.read(&mut buf) {
            self.front_raw.extend_from_slice(&buf[..n]);
        }
        self.parse_front();
    }
}

/// An intermediate transport packet with a deterministic body of `len` bytes.
fn packet(len: usize, seed: u8) -> Vec<u8> {
    let mut v = (len as u32).to_le_bytes().to_vec();
    v.extend((0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)));
    v
}

fn bulk(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7) ^ seed ^ (i >> 9) as u8)
        .collect()
}
