//! A blocking obfuscated2 MTProto client over any `Read + Write` stream ([`MtSession`]), so the
//! rig speaks MTProto inside its own fake-TLS stream ([`super::faketls::TlsClient`]) the way
//! `applet::probe::MtClient` does over a bare TCP socket. The bench driver includes it too
//! (`examples/bench/direct.rs`: its secretless and plain clients).
//!
//! Owns only the plumbing: the init and ciphers come from `mtproto::obfs2` (§1.3 of
//! docs/protocol.md), framing from `mtproto::framing`, `req_pq_multi`/`resPQ` from
//! `mtproto::packet`. Reads rely on the stream's own timeouts. Test code.

use std::io::{self, Read, Write};

use tg_ws_proxy::mtproto::framing::{self, Decoder};
use tg_ws_proxy::mtproto::obfs2::{self, Cipher, Tag};
use tg_ws_proxy::mtproto::packet;
use tg_ws_proxy::rng::Rng;

/// An obfuscated2 client session over `S`. Nothing is sent until the caller sends the init
/// ([`MtSession::send_init`] or by hand from [`MtSession::init`]).
pub struct MtSession<S> {
    pub stream: S,
    tag: Tag,
    /// The 64-byte client init (already carrying the encrypted tag and DC); for a plain
    /// transport ([`MtSession::plain`]) its marker in the first `init_len` bytes.
    pub init: [u8; 64],
    init_len: usize,
    /// `None` for a plain transport (no obfuscation).
    encrypt: Option<Cipher>,
    decrypt: Option<Cipher>,
    decoder: Decoder,
    rng: Rng,
}

impl<S: Read + Write> MtSession<S> {
    /// A session for secret `key`, transport `tag`, signed DC index `dc`.
    pub fn new(stream: S, key: &[u8; 16], tag: Tag, dc: i16, rng: &mut Rng) -> MtSession<S> {
        MtSession::keyed(stream, Some(key), tag, dc, rng)
    }

    /// A direct client's session (no proxy secret: what an app sends to a DC address itself,
    /// docs/protocol.md §1.9).
    pub fn direct(stream: S, tag: Tag, dc: i16, rng: &mut Rng) -> MtSession<S> {
        MtSession::keyed(stream, None, tag, dc, rng)
    }

    fn keyed(stream: S, key: Option<&[u8; 16]>, tag: Tag, dc: i16, rng: &mut Rng) -> MtSession<S> {
        let started = obfs2::initiate(tag, dc, key, rng);
        let mut seed = [0u8; 48];
        rng.fill(&mut seed);
        MtSession {
            stream,
            tag,
            init: started.init,
            init_len: 64,
            encrypt: Some(started.encrypt),
            decrypt: Some(started.decrypt),
            decoder: Decoder::new(tag),
            rng: Rng::from_seed(seed),
        }
    }

    /// An unobfuscated transport: its marker (`ef`, or `ee`×4 / `dd`×4) is the "init", packets
    /// go as they are.
    pub fn plain(stream: S, tag: Tag, rng: &mut Rng) -> MtSession<S> {
        let mut seed = [0u8; 48];
        rng.fill(&mut seed);
        let mut init = [0u8; 64];
        let len = match tag {
            Tag::Abridged => 1,
            _ => 4,
        };
        init[..4].copy_from_slice(&tag.bytes());
        MtSession {
            stream,
            tag,
            init,
            init_len: len,
            encrypt: None,
            decrypt: None,
            decoder: Decoder::new(tag),
            rng: Rng::from_seed(seed),
        }
    }

    /// The bytes [`MtSession::send_init`] writes: the 64-byte init, or a plain marker.
    pub fn init_bytes(&self) -> &[u8] {
        &self.init[..self.init_len]
    }

    /// Writes the 64-byte init (a plain transport's marker).
    pub fn send_init(&mut self) -> io::Result<()> {
        let init = self.init;
        self.stream.write_all(&init[..self.init_len])
    }

    /// One packet carrying `payload`, framed for this tag and encrypted (the cipher advances:
    /// the bytes must be sent, in order).
    pub fn wire_packet(&mut self, payload: &[u8]) -> Vec<u8> {
        let mut w = framing::encode(self.tag, payload, &mut self.rng);
        if let Some(c) = &mut self.encrypt {
            c.apply(&mut w);
        }
        w
    }

    /// Frames, encrypts and writes one packet.
    pub fn send_packet(&mut self, payload: &[u8]) -> io::Result<()> {
        let w = self.wire_packet(payload);
        self.stream.write_all(&w)
    }

    /// Reads until one whole packet decodes; its payload (padded intermediate: padding kept).
    /// EOF → `UnexpectedEof`, bad framing → `InvalidData`, other errors as the stream gives.
    pub fn recv_packet(&mut self) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match self.decoder.next() {
                Ok(Some(p)) => return Ok(p),
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
            }
            let n = match self.stream.read(&mut buf) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if let Some(c) = &mut self.decrypt {
                c.apply(&mut buf[..n]);
            }
            self.decoder.push(&buf[..n]);
        }
    }

    /// Sends `req_pq_multi` with a random nonce and checks the `resPQ` names it.
    pub fn req_pq(&mut self) -> Result<(), String> {
        let mut nonce = [0u8; 16];
        self.rng.fill(&mut nonce);
        let req = packet::req_pq_multi(&nonce, packet::msg_id(1_700_000_000_000));
        self.send_packet(&req)
            .map_err(|e| format!("send req_pq_multi: {e}"))?;
        let reply = self
            .recv_packet()
            .map_err(|e| format!("waiting for resPQ: {e}"))?;
        packet::parse_res_pq(&reply, &nonce)
            .map(|_| ())
            .map_err(|e| format!("bad resPQ: {e:?}"))
    }

    /// A `req_pq_multi` packet ready for the wire (nonce returned), for tests that place it by
    /// hand (e.g. in the same record as the init).
    pub fn wire_req_pq(&mut self) -> (Vec<u8>, [u8; 16]) {
        let mut nonce = [0u8; 16];
        self.rng.fill(&mut nonce);
        let req = packet::req_pq_multi(&nonce, packet::msg_id(1_700_000_000_000));
        (self.wire_packet(&req), nonce)
    }

    /// Reads the next packet and checks it is the `resPQ` for `nonce`.
    pub fn expect_res_pq(&mut self, nonce: &[u8; 16]) -> Result<(), String> {
        let reply = self
            .recv_packet()
            .map_err(|e| format!("waiting for resPQ: {e}"))?;
        packet::parse_res_pq(&reply, nonce)
            .map(|_| ())
            .map_err(|e| format!("bad resPQ: {e:?}"))
    }
}
