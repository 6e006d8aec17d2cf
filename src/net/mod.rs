//! Socket-facing code. `io` triages `WouldBlock`, `tcp` opens non-blocking connects, `tls` is the
//! only rustls user, `ws` the only tungstenite user, `wsframe` the sans-IO RFC 6455 frame header
//! codec, `wslink` the sans-IO WebSocket link over our buffers (framing, masking, control frames),
//! and `dial` chains TCP → TLS → upgrade into one resumable dial that yields an `Upstream`
//! (`upstream`: the connected socket the relay and the pool hold).
//! `faketls_stream` is an `Endpoint` speaking the fake-TLS record layer (`mtproto::faketls::record`)
//! over another. `proxy_header` parses the PROXY protocol v1/v2 header a load balancer puts first (sans-IO).
//! `socks5_server` is the SOCKS5 inbound's sans-IO server core (RFC 1928/1929, `--socks5`).

pub mod dial;
pub mod faketls_stream;
pub mod io;
pub mod outbound;
pub mod proxy_header;
pub mod socks5_server;
pub mod tcp;
pub mod tls;
pub mod upstream;
pub mod ws;
pub mod wsframe;
pub mod wslink;
