//! tg-ws-proxy: an MTProto proxy for home routers.
//!
//! Telegram clients on the LAN connect with obfuscated2; the proxy carries their traffic to a
//! Telegram DC down a ladder of tiers: Telegram's WebSocket front (`ws`), a Cloudflare Worker
//! (`worker`), a Cloudflare-proxied domain (`cfproxy`) or raw obfuscated2 TCP (`tcp`). One
//! single-threaded mio reactor drives fixed slab-allocated connection state machines; see
//! `reactor` for the loop, `conn` for the per-session state machine and `route` for the ladder.
//! Why it is built this way: docs/design.md; the wire facts it relies on: docs/protocol.md.
//!
//! Layering (lower never imports higher, and no two modules import each other): `rng, timer,
//! buf, error, token, logging, mem` → `mtproto, dns` → `net` → `config` → `stats, relay` →
//! `route` → `conn` → `control` → `reactor` → `cli` → `applet` → `main` (docs/architecture.md;
//! `tests/architecture.rs` checks it).

pub mod applet;
pub mod buf;
pub mod cli;
pub mod config;
pub mod conn;
pub mod control;
pub mod dns;
pub mod error;
pub mod logging;
pub mod mem;
pub mod mtproto;
pub mod net;
pub mod reactor;
pub mod relay;
pub mod rng;
pub mod route;
pub mod stats;
pub mod timer;
pub mod token;
