//! The SOCKS5 client side the tests share (RFC 1928): the greeting offering "no
//! authentication" and a CONNECT to an IPv4 destination, as one buffer — what a client that
//! does not wait for the method choice writes. Test code.
#![allow(dead_code)]

use std::net::SocketAddrV4;

/// `05 01 00` (one method: no authentication) then `05 01 00 01 IP PORT` (CONNECT to `dst`).
/// The proxy answers `05 00` and a 10-byte reply (`05 REP 00 01 BND.ADDR BND.PORT`).
pub fn noauth_connect(dst: SocketAddrV4) -> Vec<u8> {
    let mut b = vec![5, 1, 0, 5, 1, 0, 1];
    b.extend_from_slice(&dst.ip().octets());
    b.extend_from_slice(&dst.port().to_be_bytes());
    b
}

/// DC 2's address in the SOCKS5 tests (`--dc-addr 127.0.0.2=2`), port 443.
pub fn dc2() -> SocketAddrV4 {
    SocketAddrV4::new([127, 0, 0, 2].into(), 443)
}
