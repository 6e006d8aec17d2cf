//! PROXY protocol header (src/net/proxy_header.rs): the bytes a load balancer sends first.
//!
//! Input: the client's first bytes, whole. `parse` never panics and its verdicts agree with
//! each other: `Done` never claims more than it was given or than `MAX_HEADER`, a source comes
//! only from PROXY commands (with its destination: both ends or neither), the same header with anything after it (or cut to exactly
//! `consumed`) gives the same verdict, and every shorter cut of it asks for more (never an
//! error: a valid header has no invalid prefix); `NeedMore` asks for more than it was given,
//! within `MAX_HEADER`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tg_ws_proxy::net::proxy_header::{parse, Parsed, MAX_HEADER};

fuzz_target!(|raw: &[u8]| {
    match parse(raw) {
        Ok(Parsed::Done {
            source,
            dest,
            consumed,
        }) => {
            assert!(consumed <= raw.len() && consumed <= MAX_HEADER);
            assert_eq!(source.is_some(), dest.is_some(), "both ends or neither");
            let whole = Ok(Parsed::Done {
                source,
                dest,
                consumed,
            });
            assert_eq!(parse(&raw[..consumed]), whole, "cut to consumed");
            // Every cut below `consumed` (all of them for v1-sized headers, 64 otherwise).
            let step = (consumed / 64).max(1);
            for cut in (0..consumed).step_by(step) {
                match parse(&raw[..cut]) {
                    Ok(Parsed::NeedMore { at_least }) => {
                        assert!(at_least > cut && at_least <= consumed, "cut {cut}: {at_least}")
                    }
                    other => panic!("cut {cut} of a {consumed}-byte header: {other:?}"),
                }
            }
        }
        Ok(Parsed::NeedMore { at_least }) => {
            assert!(at_least > raw.len() && at_least <= MAX_HEADER);
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
