//! obfuscated2 init (src/mtproto/obfs2.rs): the 64 bytes a client sends first.
//!
//! Input: `init[64] ‖ up to 3 secrets of 16 bytes`, checked with `accept`, `accept_raw`,
//! `is_reserved` and `DcId::from_index` on whatever DC index decrypts out. Then a round trip
//! with the input as parameters: an init built by `initiate` (tag, DC, optional secret and the
//! generator's seed taken from the input) is never reserved, is accepted with the same tag and DC,
//! and the two sides' ciphers agree in both directions.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tg_ws_proxy::mtproto::dc::DcId;
use tg_ws_proxy::mtproto::obfs2::{self, Tag};
use tg_ws_proxy_fuzz::rng_from;

const TAGS: [Tag; 3] = [Tag::Abridged, Tag::Intermediate, Tag::PaddedIntermediate];

fuzz_target!(|raw: &[u8]| {
    if let Some(init) = raw.get(..64) {
        let init: [u8; 64] = init.try_into().expect("64 bytes");
        let secrets: Vec<[u8; 16]> = raw[64..]
            .chunks_exact(16)
            .take(3)
            .map(|c| c.try_into().expect("16 bytes"))
            .collect();
        let _ = obfs2::is_reserved(&init);
        if let Ok(mut a) = obfs2::accept(&init, &secrets) {
            assert!(a.secret_index < secrets.len());
            let _ = DcId::from_index(a.dc);
            let mut rest = raw[64..].to_vec();
            a.decrypt.apply(&mut rest);
            a.encrypt.apply(&mut rest);
        }
        if let Ok(a) = obfs2::accept_raw(&init) {
            assert_eq!(a.secret_index, 0);
            let _ = DcId::from_index(a.dc);
        }
    }

    let [t, d0, d1, rest @ ..] = raw else { return };
    let tag = TAGS[usize::from(*t) % 3];
    let dc = i16::from_le_bytes([*d0, *d1]);
    let secret: Option<[u8; 16]> = (t & 0x80 != 0)
        .then(|| rest.get(..16).map(|s| s.try_into().expect("16 bytes")))
        .flatten();
    let mut rng = rng_from(rest);
    let mut ini = obfs2::initiate(tag, dc, secret.as_ref(), &mut rng);
    assert!(
        !obfs2::is_reserved(&ini.init),
        "initiate produced a reserved init"
    );
    let mut acc = match &secret {
        Some(s) => obfs2::accept(&ini.init, &[[0u8; 16], *s]),
        None => obfs2::accept_raw(&ini.init),
    }
    .expect("our own init is accepted");
    assert_eq!(acc.tag, tag);
    assert_eq!(acc.dc, dc);
    let plain = rest.to_vec();
    let mut wire = plain.clone();
    ini.encrypt.apply(&mut wire);
    acc.decrypt.apply(&mut wire);
    assert_eq!(wire, plain, "client→proxy ciphers disagree");
    acc.encrypt.apply(&mut wire);
    ini.decrypt.apply(&mut wire);
    assert_eq!(wire, plain, "proxy→client ciphers disagree");
});
