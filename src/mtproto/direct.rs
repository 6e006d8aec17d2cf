//! A client's *direct* MTProto transport (docs/protocol.md §1.9): what a Telegram app sends to a
//! DC address when it uses no proxy secret — reached here through transparent redirection or a
//! SOCKS5 CONNECT. [`classify`] tells a secretless obfuscated2 init, a plain (unobfuscated)
//! abridged / intermediate / padded stream, and traffic that is not MTProto at all (TLS or HTTP
//! to a Telegram web address) from garbage; [`patch_dc`] rewrites the init's DC index in the
//! ciphertext so the client's own init can go upstream (the cheap relay, §1.9).
//!
//! Sans-IO: bytes in, outcome out. Which DC an address is (`route::dc_table`), reading the
//! bytes (`conn`) and relaying them (`relay`) live elsewhere; the HTTP/TLS predicates are
//! `mtproto::sniff`, shared with the proxy handshake.

use super::obfs2::{self, Accepted, Tag, INIT_LEN};
use super::sniff;

/// What the first bytes of a direct-transport client are (docs/protocol.md §1.9).
// `Obfs2` holds the two ciphers (~2 KiB) by value, like `obfs2::accept`'s result: a return
// value moved once into the session, never stored in bulk, so no box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Classified {
    /// Undecided: call again once the prefix holds at least this many bytes in total (never
    /// more than [`INIT_LEN`]).
    Need(usize),
    /// A secretless obfuscated2 init (`prefix[..64]`) with a valid tag: raw keys from the init
    /// itself (`obfs2::accept_raw`). The ciphers are already past the init.
    Obfs2(Accepted),
    /// An unobfuscated transport, announced by its marker (`ef`, or `ee`×4 / `dd`×4) at the
    /// start of the prefix; the marker is [`plain_marker_len`] bytes, MTProto packets follow.
    Plain(Tag),
    /// A TLS handshake record or an HTTP request (or a start a client never sends as an init,
    /// `obfs2::is_reserved`, that does not open as one): web traffic to a Telegram address.
    NotMtproto,
    /// 64 bytes that are none of the above: no valid tag without a secret.
    Bad,
}

/// Classifies the first bytes a direct-transport client sent (`prefix`, as many as have
/// arrived; more than 64 are fine, only the start is looked at). In order:
/// `ef` → `Plain(Abridged)` (1 byte decides); a TLS record header (`16 03 00`–`16 03 04`,
/// RFC 8446 §5.1) → `NotMtproto` once the whole record is here if it is shorter than 64 bytes,
/// else at 64 bytes unless those open as an obfuscated2 init (a random init starts `16 03` once
/// in 65,536); `ee`×4 / `dd`×4 → `Plain(Intermediate | PaddedIntermediate)`; `GET `, `POST`,
/// `HEAD`, `OPTI` (never an init's start, §3.1) → `NotMtproto`; then at 64 bytes: a valid tag
/// with raw keys → `Obfs2`, a reserved start or another HTTP method (`sniff::looks_http`) →
/// `NotMtproto`, anything else → `Bad`.
pub fn classify(prefix: &[u8]) -> Classified {
    let Some(&first) = prefix.first() else {
        return Classified::Need(1);
    };
    if first == 0xef {
        return Classified::Plain(Tag::Abridged);
    }
    if sniff::could_be_tls_record(prefix) {
        return classify_tls_like(prefix);
    }
    if prefix.len() < 4 {
        return Classified::Need(4);
    }
    match Tag::from_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) {
        Some(t @ (Tag::Intermediate | Tag::PaddedIntermediate)) => return Classified::Plain(t),
        // `ef ef ef ef` starts with `ef`: handled above.
        Some(Tag::Abridged) | None => {}
    }
    if sniff::is_http(prefix) {
        return Classified::NotMtproto;
    }
    let Some(init) = whole_init(prefix) else {
        return Classified::Need(INIT_LEN);
    };
    match obfs2::accept_raw(init) {
        Ok(a) => Classified::Obfs2(a),
        Err(_) if obfs2::is_reserved(init) || sniff::looks_http(prefix) => Classified::NotMtproto,
        Err(_) => Classified::Bad,
    }
}

/// The `16 03 0x` branch of [`classify`].
fn classify_tls_like(prefix: &[u8]) -> Classified {
    let Some(record) = sniff::tls_record_len(prefix) else {
        // Fewer than 5 bytes that could still be a record header.
        return Classified::Need(5);
    };
    if record <= INIT_LEN {
        return if prefix.len() >= record {
            Classified::NotMtproto
        } else {
            Classified::Need(record)
        };
    }
    match whole_init(prefix) {
        None => Classified::Need(INIT_LEN),
        Some(init) => match obfs2::accept_raw(init) {
            Ok(a) => Classified::Obfs2(a),
            Err(_) => Classified::NotMtproto,
        },
    }
}

fn whole_init(prefix: &[u8]) -> Option<&[u8; INIT_LEN]> {
    prefix.get(..INIT_LEN)?.try_into().ok()
}

/// Length of a plain transport's marker at the start of the stream: 1 for abridged (`ef`), 4
/// for intermediate and padded (`ee`×4, `dd`×4). The bytes after it are MTProto packets.
pub fn plain_marker_len(tag: Tag) -> usize {
    match tag {
        Tag::Abridged => 1,
        Tag::Intermediate | Tag::PaddedIntermediate => 4,
    }
}

/// Rewrites the DC index at `[60..62)` of a secretless init (`init`, as received, accepted as
/// `accepted`) to `dc_index` (i16 LE, the form of §1.4 / §3.1) without touching any other byte
/// or any cipher: the keystream over those two bytes is `init ⊕ plaintext`, and the plaintext is
/// `accepted.dc`, so XOR-ing old ⊕ new plaintext into the ciphertext is enough
/// (docs/protocol.md §1.9). The patched init opens with the same tag and ciphers and the new DC;
/// `accepted.dc` still holds the old index.
pub fn patch_dc(init: &mut [u8; INIT_LEN], accepted: &Accepted, dc_index: i16) {
    let old = accepted.dc.to_le_bytes();
    let new = dc_index.to_le_bytes();
    init[60] ^= old[0] ^ new[0];
    init[61] ^= old[1] ^ new[1];
}

#[cfg(test)]
mod tests;
