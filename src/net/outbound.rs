//! The outbound proxy (`--outbound-proxy`): SOCKS5 or HTTP CONNECT between our TCP connect and
//! whatever a route speaks next. Skeleton: the type only; the handshake arrives with issue 11.

/// An outbound proxy every upstream TCP connection goes through (docs/protocol.md §4.7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboundProxy {
    /// The proxy's host (name or IP literal) and port.
    pub host: String,
    /// TCP port.
    pub port: u16,
}
