//! The client side of a session as one stream: the accepted socket, plain (obfuscated2 straight
//! on TCP) or with the fake-TLS record layer on top once an `ee` handshake was accepted
//! (`net::faketls_stream::FakeTls`).
//!
//! Implements `Read`, `Write` and `Endpoint` by delegation, so the handshake, the connect phase,
//! the relay core and the drain read and write it the same way. The socket stays where mio
//! registered it: switching to fake-TLS does not re-register, and the session's close path
//! shuts the socket itself ([`ClientIo::tcp`]).

use std::io::{self, IoSlice, Read, Write};

use mio::net::TcpStream;

use crate::net::faketls_stream::FakeTls;
use crate::net::io::Endpoint;

/// What runs on the client socket.
enum Layer {
    /// Obfuscated2 straight on TCP (plain and `dd` secrets, and `ee` during the handshake).
    Plain,
    /// Fake-TLS records (after an accepted `ee` ClientHello and our answer).
    FakeTls(FakeTls),
}

/// A session's client stream.
pub struct ClientIo {
    tcp: TcpStream,
    layer: Layer,
}

impl ClientIo {
    /// A plain client on `tcp` (already registered by the caller).
    pub fn plain(tcp: TcpStream) -> ClientIo {
        ClientIo {
            tcp,
            layer: Layer::Plain,
        }
    }

    /// From now on every byte is carried in fake-TLS records (call at a record boundary: after
    /// the ClientHello was read and the whole answer written).
    pub fn start_fake_tls(&mut self) {
        self.layer = Layer::FakeTls(FakeTls::new());
    }

    /// True once [`ClientIo::start_fake_tls`] ran.
    pub fn is_fake_tls(&self) -> bool {
        matches!(self.layer, Layer::FakeTls(_))
    }

    /// The socket itself (raw bytes, bypassing any record layer): the ServerHello is written
    /// here, and the close path shuts it down.
    pub fn tcp(&mut self) -> &mut TcpStream {
        &mut self.tcp
    }
}

impl Read for ClientIo {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.layer {
            Layer::Plain => self.tcp.read(buf),
            Layer::FakeTls(t) => t.read(&mut self.tcp, buf),
        }
    }
}

impl Write for ClientIo {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.layer {
            Layer::Plain => self.tcp.write(buf),
            Layer::FakeTls(t) => t.write(&mut self.tcp, buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match &mut self.layer {
            Layer::Plain => self.tcp.write_vectored(bufs),
            // One record at a time: the first non-empty slice.
            Layer::FakeTls(t) => {
                let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| b);
                t.write(&mut self.tcp, first)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}

impl Endpoint for ClientIo {
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.tcp.shutdown_write()
    }

    fn flush_backlog(&mut self) -> io::Result<bool> {
        match &mut self.layer {
            Layer::Plain => self.tcp.flush_backlog(),
            Layer::FakeTls(t) => t.flush_backlog(&mut self.tcp),
        }
    }

    fn has_backlog(&self) -> bool {
        match &self.layer {
            Layer::Plain => self.tcp.has_backlog(),
            Layer::FakeTls(t) => t.has_backlog(),
        }
    }
}
