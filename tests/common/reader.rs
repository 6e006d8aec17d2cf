//! The client's side of a relayed download: decrypts what the proxy sends and splits it into
//! MTProto packets. Shared by the bulk and reload black-box tests.

use std::io::{self, Read};
use std::net::TcpStream;

use tg_ws_proxy::mtproto::framing::Decoder;
use tg_ws_proxy::mtproto::obfs2::{Cipher, Tag};

/// Client-side reader: decrypts and decodes packets from the proxy.
pub struct Reader {
    sock: TcpStream,
    dec: Cipher,
    decoder: Decoder,
    buf: Vec<u8>,
    /// Bytes read off the socket so far.
    pub bytes: u64,
}

impl Reader {
    /// A reader on `sock` (the client's read half) with the session's decrypting `dec`,
    /// reading `buf_len` bytes at a time.
    pub fn new(sock: TcpStream, dec: Cipher, tag: Tag, buf_len: usize) -> Self {
        Reader {
            sock,
            dec,
            decoder: Decoder::new(tag),
            buf: vec![0u8; buf_len],
            bytes: 0,
        }
    }

    /// The next whole packet.
    pub fn next(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(p) = self
                .decoder
                .next()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?
            {
                return Ok(p);
            }
            let n = self.sock.read(&mut self.buf)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.bytes += n as u64;
            self.dec.apply(&mut self.buf[..n]);
            self.decoder.push(&self.buf[..n]);
        }
    }
}
