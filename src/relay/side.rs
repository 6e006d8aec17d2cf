//! The client's side of a relay and the mode it allows (docs/protocol.md §1.9): a proxy
//! client's ciphers (re-encryption, today's path), a secretless direct client whose own init can
//! go upstream (pass-through: no AES on the way down, none on the way up but for packet headers),
//! or a plain transport (no client cipher at all). Also the sparse follower the pass-through
//! uses to keep the reply check (`reply`) on a stream it never decrypts: only header and key
//! bytes are decrypted, bodies are skipped by moving the CTR counter.
//!
//! What a tier allows is the caller's to say: pass-through needs a fresh upstream that carries a
//! raw MTProto transport to the DC. [`Relay`](super::Relay) falls back to re-encryption by
//! itself when asked for an MTProto proxy's init, and when the caller asks (`Relay::reencrypt`:
//! a pooled start, whose request must stay replayable).

use crate::mtproto::obfs2::{Accepted, Cipher, Tag, INIT_LEN};

use super::reply::{BadReply, Replies};

/// The client's side of a session, as its handshake found it.
#[derive(Debug)]
pub enum ClientSide {
    /// A client whose bytes are decrypted and re-encrypted: a proxy client (its secret's
    /// ciphers), or a direct one on a tier that needs a fresh relay init. Today's path.
    Proxy(Accepted),
    /// A secretless obfuscated2 client (`mtproto::direct::Classified::Obfs2`): `init` is its
    /// 64 bytes as received, `accepted` what they opened to. The relay sends this init upstream
    /// with bytes 60–61 patched and relays both directions without re-encryption.
    Direct {
        init: [u8; INIT_LEN],
        accepted: Accepted,
    },
    /// An unobfuscated abridged / intermediate / padded client (`Classified::Plain`), its
    /// marker already consumed: no client cipher; a fresh relay init upstream.
    Plain(Tag),
}

impl ClientSide {
    /// The client's transport.
    pub fn tag(&self) -> Tag {
        match self {
            ClientSide::Proxy(a) | ClientSide::Direct { accepted: a, .. } => a.tag,
            ClientSide::Plain(t) => *t,
        }
    }

    /// The DC index the client's init carried (§1.4); `None` for a plain transport.
    pub fn packet_dc(&self) -> Option<i16> {
        match self {
            ClientSide::Proxy(a) | ClientSide::Direct { accepted: a, .. } => Some(a.dc),
            ClientSide::Plain(_) => None,
        }
    }

    /// Turns client bytes read before the relay exists (while connecting) into plaintext, in
    /// place: the relay's `up` buffer holds client plaintext on entry, whatever the side.
    pub fn client_read(&mut self, bytes: &mut [u8]) {
        match self {
            ClientSide::Proxy(a) | ClientSide::Direct { accepted: a, .. } => a.decrypt.apply(bytes),
            ClientSide::Plain(_) => {}
        }
    }

    /// The same client relayed by re-encryption (what a tier that cannot take the client's own
    /// init gets): `Direct` becomes `Proxy` with the same ciphers; the others are unchanged.
    pub fn reencrypted(self) -> ClientSide {
        match self {
            ClientSide::Direct { accepted, .. } => ClientSide::Proxy(accepted),
            other => other,
        }
    }
}

/// How a relay treats the client's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayMode {
    /// Client-decrypt, relay-encrypt up; relay-decrypt, client-encrypt down (4 AES passes per
    /// byte relayed both ways).
    Reencrypt,
    /// The client's own init upstream (DC patched): bytes pass as they are both ways; only packet
    /// headers (and the first reply's key) are decrypted, for the reply check and, on a
    /// one-packet-per-message link, for the message boundaries.
    PassThrough,
    /// No client cipher: relay-encrypt up, relay-decrypt down (2 AES passes).
    Plain,
}

impl RelayMode {
    /// Short name for session records: `reencrypt`, `passthrough`, `plain`.
    pub fn name(self) -> &'static str {
        match self {
            RelayMode::Reencrypt => "reencrypt",
            RelayMode::PassThrough => "passthrough",
            RelayMode::Plain => "plain",
        }
    }
}

/// Bytes decrypted at once where the follower must look (a header plus a key is at most 12).
const LOOK: usize = 16;

/// A tracker the sparse follower feeds: how much it can skip, skipping, and looking.
pub(super) trait Tracker {
    /// Bytes that may pass next unseen.
    fn skippable(&self) -> usize;
    /// Passes `n` bytes (at most [`Tracker::skippable`]).
    fn skip(&mut self, n: usize);
    /// Shows the next plaintext bytes.
    fn look(&mut self, plain: &[u8]) -> Result<(), BadReply>;
}

/// The client's direction of the reply check.
pub(super) struct Up<'a>(pub &'a mut Replies);

/// The DC's direction of the reply check.
pub(super) struct Down<'a>(pub &'a mut Replies);

impl Tracker for Up<'_> {
    fn skippable(&self) -> usize {
        self.0.up_skippable()
    }
    fn skip(&mut self, n: usize) {
        self.0.up_skip(n);
    }
    fn look(&mut self, plain: &[u8]) -> Result<(), BadReply> {
        self.0.client_sent(plain);
        Ok(())
    }
}

impl Tracker for Down<'_> {
    fn skippable(&self) -> usize {
        self.0.down_skippable()
    }
    fn skip(&mut self, n: usize) {
        self.0.down_skip(n);
    }
    fn look(&mut self, plain: &[u8]) -> Result<(), BadReply> {
        self.0.server_sent(plain)
    }
}

/// Follows `data` (ciphertext at `cipher`'s position) for `t`: what it can skip passes by
/// moving the counter, the rest is decrypted a few bytes at a time into a copy and shown to it.
/// `data` is not changed; `cipher` ends past it (also on an error).
pub(super) fn follow(
    cipher: &mut Cipher,
    data: &[u8],
    t: &mut impl Tracker,
) -> Result<(), BadReply> {
    let mut at = 0;
    while at < data.len() {
        let rest = data.len() - at;
        let s = t.skippable().min(rest);
        if s > 0 {
            cipher.skip(s as u64);
            t.skip(s);
            at += s;
            continue;
        }
        let k = rest.min(LOOK);
        let mut copy = [0u8; LOOK];
        copy[..k].copy_from_slice(&data[at..at + k]);
        cipher.apply(&mut copy[..k]);
        at += k;
        if let Err(bad) = t.look(&copy[..k]) {
            cipher.skip((data.len() - at) as u64);
            return Err(bad);
        }
    }
    Ok(())
}
