//! RFC 6455 §5.2 WebSocket frame header codec and payload masking, sans-IO.
//!
//! Owns only the byte layout of a frame header and the masking XOR. It does not buffer payloads,
//! reassemble messages, answer pings or run the HTTP upgrade (`net::ws` does, driving this codec);
//! it never reads sockets.

use std::fmt;

/// Frame opcode (RFC 6455 §5.2). Control frames are `Close`, `Ping`, `Pong`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

impl Opcode {
    /// Decodes the 4-bit opcode; `None` for reserved values (3–7, 0xB–0xF) or values above 0xF.
    pub fn from_u8(v: u8) -> Option<Opcode> {
        match v {
            0x0 => Some(Opcode::Continuation),
            0x1 => Some(Opcode::Text),
            0x2 => Some(Opcode::Binary),
            0x8 => Some(Opcode::Close),
            0x9 => Some(Opcode::Ping),
            0xA => Some(Opcode::Pong),
            _ => None,
        }
    }

    /// The 4-bit wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            Opcode::Continuation => 0x0,
            Opcode::Text => 0x1,
            Opcode::Binary => 0x2,
            Opcode::Close => 0x8,
            Opcode::Ping => 0x9,
            Opcode::Pong => 0xA,
        }
    }

    /// True for `Close`, `Ping`, `Pong`.
    pub fn is_control(self) -> bool {
        matches!(self, Opcode::Close | Opcode::Ping | Opcode::Pong)
    }
}

/// A decoded frame header. `len` is the payload length in bytes; `mask` is the masking key if
/// the MASK bit is set (client→server frames).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub fin: bool,
    pub opcode: Opcode,
    pub mask: Option<[u8; 4]>,
    pub len: u64,
}

/// Longest possible header: 2 + 8 (64-bit length) + 4 (masking key).
pub const MAX_HEADER: usize = 14;

/// A header that violates RFC 6455 §5.2 / §5.5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// RSV1–3 set (no extension negotiated).
    ReservedBits,
    /// Reserved opcode value.
    BadOpcode(u8),
    /// Control frame with payload longer than 125 bytes.
    ControlTooLong,
    /// Control frame with FIN clear.
    FragmentedControl,
    /// Length not in its minimal encoding, or a 64-bit length with the top bit set.
    NonMinimalLength,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::ReservedBits => f.write_str("ws frame has reserved bits set"),
            FrameError::BadOpcode(v) => write!(f, "ws frame has reserved opcode {v:#x}"),
            FrameError::ControlTooLong => f.write_str("ws control frame longer than 125 bytes"),
            FrameError::FragmentedControl => f.write_str("ws control frame is fragmented"),
            FrameError::NonMinimalLength => f.write_str("ws frame length is badly encoded"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Parses a frame header at the start of `buf`. `Ok(None)` if more bytes are needed;
/// `Ok(Some((header, n)))` with `n` = header length in bytes (2..=14). Rejects RSV bits,
/// reserved opcodes, control frames that are fragmented or longer than 125 bytes, non-minimal
/// length encodings and 64-bit lengths with the top bit set. Errors visible in the first two
/// bytes are reported even if the rest of the header is missing.
pub fn parse_header(buf: &[u8]) -> Result<Option<(Header, usize)>, FrameError> {
    let (b0, b1) = match buf {
        [b0, b1, ..] => (*b0, *b1),
        _ => return Ok(None),
    };
    if b0 & 0x70 != 0 {
        return Err(FrameError::ReservedBits);
    }
    let op = b0 & 0x0f;
    let opcode = Opcode::from_u8(op).ok_or(FrameError::BadOpcode(op))?;
    let fin = b0 & 0x80 != 0;
    let masked = b1 & 0x80 != 0;
    let len7 = b1 & 0x7f;
    if opcode.is_control() {
        if !fin {
            return Err(FrameError::FragmentedControl);
        }
        if len7 > 125 {
            return Err(FrameError::ControlTooLong);
        }
    }
    let (len, mut at) = match len7 {
        126 => {
            let Some(b) = buf.get(2..4) else {
                return Ok(None);
            };
            let len = u16::from_be_bytes([b[0], b[1]]);
            if len < 126 {
                return Err(FrameError::NonMinimalLength);
            }
            (u64::from(len), 4)
        }
        127 => {
            let Some(b) = buf.get(2..10) else {
                return Ok(None);
            };
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            let len = u64::from_be_bytes(a);
            if len >> 63 != 0 || len <= u64::from(u16::MAX) {
                return Err(FrameError::NonMinimalLength);
            }
            (len, 10)
        }
        n => (u64::from(n), 2),
    };
    let mask = if masked {
        let Some(k) = buf.get(at..at + 4) else {
            return Ok(None);
        };
        at += 4;
        Some([k[0], k[1], k[2], k[3]])
    } else {
        None
    };
    Ok(Some((
        Header {
            fin,
            opcode,
            mask,
            len,
        },
        at,
    )))
}

/// Writes `h` into `out` with the minimal length encoding (7-bit, 16-bit BE or 64-bit BE), the
/// MASK bit and key when `h.mask` is set; returns the header length in bytes. RSV bits are 0.
/// `h.len` must be below 2^63 (local invariant; larger values are truncated to 63 bits).
pub fn format_header(h: &Header, out: &mut [u8; MAX_HEADER]) -> usize {
    out[0] = (if h.fin { 0x80 } else { 0 }) | h.opcode.to_u8();
    let mask_bit = if h.mask.is_some() { 0x80 } else { 0 };
    let mut at = if h.len < 126 {
        out[1] = mask_bit | h.len as u8;
        2
    } else if h.len <= u64::from(u16::MAX) {
        out[1] = mask_bit | 126;
        out[2..4].copy_from_slice(&(h.len as u16).to_be_bytes());
        4
    } else {
        debug_assert!(h.len >> 63 == 0, "ws frame length over 2^63");
        out[1] = mask_bit | 127;
        out[2..10].copy_from_slice(&(h.len & (u64::MAX >> 1)).to_be_bytes());
        10
    };
    if let Some(k) = h.mask {
        out[at..at + 4].copy_from_slice(&k);
        at += 4;
    }
    at
}

/// XORs `data` with the masking key as if `data` started at payload offset `offset`, so a
/// payload can be (un)masked in pieces (RFC 6455 §5.3). Masking and unmasking are the same.
/// The loop is `tg_ws_proxy_hot::xor_mask`, compiled at `opt-level = 3` (docs/design.md §9).
pub fn apply_mask(data: &mut [u8], mask: [u8; 4], offset: u64) {
    tg_ws_proxy_hot::xor_mask(data, mask, offset);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(fin: bool, opcode: Opcode, mask: Option<[u8; 4]>, len: u64) -> Header {
        Header {
            fin,
            opcode,
            mask,
            len,
        }
    }

    #[test]
    fn round_trip_lengths_with_and_without_mask() {
        let cases = [
            (0u64, 2usize),
            (125, 2),
            (126, 4),
            (65535, 4),
            (65536, 10),
            (1 << 20, 10),
            (u64::MAX >> 1, 10),
        ];
        for (len, base) in cases {
            for mask in [None, Some([1, 2, 3, 4])] {
                for fin in [true, false] {
                    let h = hdr(fin, Opcode::Binary, mask, len);
                    let mut out = [0u8; MAX_HEADER];
                    let n = format_header(&h, &mut out);
                    assert_eq!(n, base + if mask.is_some() { 4 } else { 0 });
                    assert_eq!(parse_header(&out[..n]), Ok(Some((h, n))));
                    // Trailing payload bytes do not change the result.
                    let mut longer = out.to_vec();
                    longer.extend_from_slice(&[0xaa; 5]);
                    assert_eq!(parse_header(&longer), Ok(Some((h, n))));
                    for k in 0..n {
                        assert_eq!(parse_header(&out[..k]), Ok(None), "len {len} prefix {k}");
                    }
                }
            }
        }
    }

    #[test]
    fn known_bytes() {
        // RFC 6455 §5.7: unmasked "Hello" and masked "Hello" headers; 256-byte binary.
        assert_eq!(
            parse_header(&[0x81, 0x05]),
            Ok(Some((hdr(true, Opcode::Text, None, 5), 2)))
        );
        let masked = [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d];
        assert_eq!(
            parse_header(&masked),
            Ok(Some((
                hdr(true, Opcode::Text, Some([0x37, 0xfa, 0x21, 0x3d]), 5),
                6
            )))
        );
        let mut hello = [0x7f, 0x9f, 0x4d, 0x51, 0x58];
        apply_mask(&mut hello, [0x37, 0xfa, 0x21, 0x3d], 0);
        assert_eq!(&hello, b"Hello");
        let mut out = [0u8; MAX_HEADER];
        let n = format_header(&hdr(true, Opcode::Binary, None, 256), &mut out);
        assert_eq!(&out[..n], &[0x82, 0x7e, 0x01, 0x00]);
        let n = format_header(&hdr(true, Opcode::Binary, None, 65536), &mut out);
        assert_eq!(&out[..n], &[0x82, 0x7f, 0, 0, 0, 0, 0, 1, 0, 0]);
        let n = format_header(&hdr(false, Opcode::Continuation, Some([9; 4]), 1), &mut out);
        assert_eq!(&out[..n], &[0x00, 0x81, 9, 9, 9, 9]);
    }

    #[test]
    fn opcodes() {
        for op in [
            Opcode::Continuation,
            Opcode::Text,
            Opcode::Binary,
            Opcode::Close,
            Opcode::Ping,
            Opcode::Pong,
        ] {
            assert_eq!(Opcode::from_u8(op.to_u8()), Some(op));
        }
        for v in [3u8, 7, 0xb, 0xf, 0x10, 0xff] {
            assert_eq!(Opcode::from_u8(v), None);
        }
    }

    #[test]
    fn errors() {
        assert_eq!(parse_header(&[0x92, 0x00]), Err(FrameError::ReservedBits));
        assert_eq!(parse_header(&[0xc2, 0x00]), Err(FrameError::ReservedBits));
        assert_eq!(parse_header(&[0x83, 0x00]), Err(FrameError::BadOpcode(3)));
        assert_eq!(parse_header(&[0x8f]), Ok(None));
        assert_eq!(parse_header(&[0x8f, 0x00]), Err(FrameError::BadOpcode(0xf)));
        assert_eq!(
            parse_header(&[0x09, 0x00]),
            Err(FrameError::FragmentedControl)
        );
        assert_eq!(parse_header(&[0x88, 0x7e]), Err(FrameError::ControlTooLong));
        assert_eq!(parse_header(&[0x8a, 0x7f]), Err(FrameError::ControlTooLong));
        assert_eq!(
            parse_header(&[0x89, 125]),
            Ok(Some((hdr(true, Opcode::Ping, None, 125), 2)))
        );
        assert_eq!(
            parse_header(&[0x82, 0x7e, 0, 125]),
            Err(FrameError::NonMinimalLength)
        );
        assert_eq!(
            parse_header(&[0x82, 0x7f, 0, 0, 0, 0, 0, 0, 0xff, 0xff]),
            Err(FrameError::NonMinimalLength)
        );
        assert_eq!(
            parse_header(&[0x82, 0x7f, 0x80, 0, 0, 0, 0, 1, 0, 0]),
            Err(FrameError::NonMinimalLength)
        );
        assert!(FrameError::BadOpcode(3).to_string().contains("0x3"));
    }

    #[test]
    fn masking_in_pieces_equals_at_once() {
        let mask = [0x12, 0x34, 0x56, 0x78];
        let orig: Vec<u8> = (0..100u8).collect();
        let mut whole = orig.clone();
        apply_mask(&mut whole, mask, 0);
        for (i, &b) in whole.iter().enumerate() {
            assert_eq!(b, orig[i] ^ mask[i % 4]);
        }
        for split in [[1usize, 2], [3, 17], [8, 9], [0, 100], [33, 34], [5, 99]] {
            let mut pieces = orig.clone();
            let (a, rest) = pieces.split_at_mut(split[0]);
            let (b, c) = rest.split_at_mut(split[1] - split[0]);
            apply_mask(a, mask, 0);
            apply_mask(b, mask, split[0] as u64);
            apply_mask(c, mask, split[1] as u64);
            assert_eq!(pieces, whole, "{split:?}");
        }
        // Offsets beyond 32 bits keep the phase.
        let mut far = orig.clone();
        apply_mask(&mut far, mask, (1u64 << 40) + 4);
        assert_eq!(far, whole);
        apply_mask(&mut far, mask, 0);
        assert_eq!(far, orig);
    }

    #[test]
    fn random_headers_never_panic() {
        let mut x: u32 = 0x1234_5678;
        for _ in 0..50_000 {
            let mut b = [0u8; MAX_HEADER];
            for v in &mut b {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *v = x as u8;
            }
            let n = (x as usize >> 8) % (MAX_HEADER + 1);
            if let Ok(Some((h, used))) = parse_header(&b[..n]) {
                assert!(used <= n);
                let mut out = [0u8; MAX_HEADER];
                assert_eq!(format_header(&h, &mut out), used);
                assert_eq!(&out[..used], &b[..used]);
            }
        }
    }
}
