//! MTProto-side wire code, all sans-IO: obfuscated2 init and ciphers (`obfs2`), transport packet
//! boundaries (`framing`), DC ids, host names and IP tables (`dc`), and the handful of unencrypted
//! MTProto messages the probe and the test rig need (`packet`), fake-TLS for `ee` secrets
//! (`faketls`: ClientHello check, ServerHello, the client side), a direct (secretless) client's
//! first bytes and the init's DC patch (`direct`), and the HTTP / TLS-record predicates over a
//! client's first bytes (`sniff`).

pub mod dc;
pub mod direct;
pub mod faketls;
pub mod framing;
pub mod obfs2;
pub mod packet;
pub mod sniff;
pub mod upstream;
