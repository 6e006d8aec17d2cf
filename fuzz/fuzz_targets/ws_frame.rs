//! WS frame header decoder (src/net/wsframe.rs): `parse_header` on bytes from the front.
//!
//! Input: `[mode, split seed, bytes…]`. Invariants: an accepted header is 2..=14 bytes, within
//! the input, and `format_header` writes exactly those bytes back (the parser accepts only
//! minimal encodings); control frames are final and ≤ 125 bytes; every shorter prefix of an
//! accepted header asks for more bytes; "need more" only below 14 bytes. `apply_mask` in two
//! pieces at the split equals one pass, and twice is the identity.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tg_ws_proxy::net::wsframe::{apply_mask, format_header, parse_header, MAX_HEADER};
use tg_ws_proxy_fuzz::Input;

fuzz_target!(|raw: &[u8]| {
    let Some(inp) = Input::parse(raw) else { return };
    let data = inp.data;
    match parse_header(data) {
        Ok(Some((h, n))) => {
            assert!((2..=MAX_HEADER).contains(&n) && n <= data.len());
            if h.opcode.is_control() {
                assert!(h.fin && h.len <= 125);
            }
            assert!(h.len >> 63 == 0);
            let mut out = [0u8; MAX_HEADER];
            let m = format_header(&h, &mut out);
            assert_eq!(&out[..m], &data[..n], "format_header(parse_header(x)) != x");
            for k in 0..n {
                match parse_header(&data[..k]) {
                    Ok(None) => {}
                    other => panic!("prefix of {k} bytes of a valid header gave {other:?}"),
                }
            }
        }
        Ok(None) => assert!(data.len() < MAX_HEADER),
        Err(e) => {
            // An error stays an error when more bytes arrive.
            let mut longer = data.to_vec();
            longer.extend_from_slice(&[0u8; MAX_HEADER]);
            assert_eq!(parse_header(&longer), Err(e));
        }
    }

    let mask = [inp.mode, inp.seed, 0x5a, 0xa5];
    let off = u64::from(inp.seed) * 7;
    let mut whole = data.to_vec();
    apply_mask(&mut whole, mask, off);
    let cut = usize::from(inp.seed).min(data.len());
    let mut parts = data.to_vec();
    let (a, b) = parts.split_at_mut(cut);
    apply_mask(a, mask, off);
    apply_mask(b, mask, off + cut as u64);
    assert_eq!(whole, parts);
    apply_mask(&mut whole, mask, off);
    assert_eq!(whole, data);
});
