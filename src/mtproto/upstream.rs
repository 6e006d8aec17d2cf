//! The `mtproto` tier's upstream: another MTProto proxy (`--mtproto-proxy HOST:PORT:SECRET`),
//! reached as its client. Skeleton: the type only; the handshake arrives with issue 11.

/// One upstream MTProto proxy (docs/protocol.md §4.4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MtprotoProxy {
    /// Host (name or IP literal).
    pub host: String,
    /// TCP port.
    pub port: u16,
}
