//! tg-ws-proxy: an MTProto proxy for home routers.
//!
//! Telegram clients on the LAN connect with obfuscated2; the proxy carries their traffic to a
//! Telegram DC over WebSocket/TLS (`ws` tier) or raw obfuscated2 TCP (`tcp` tier). One
//! single-threaded mio reactor drives fixed slab-allocated connection state machines; see
//! `reactor` for the loop and `conn` for the per-session state machine.
//!
//! Layering (lower never imports higher): `timer, buf, rng, error, mtproto, net` → `conn` →
//! `reactor` → `applet, cli` → `main`.

pub mod applet;
pub mod buf;
pub mod cli;
pub mod config;
pub mod conn;
pub mod dns;
pub mod error;
pub mod logging;
pub mod mtproto;
pub mod net;
pub mod reactor;
pub mod rng;
pub mod route;
pub mod stats;
pub mod timer;
pub mod token;
