//! How a relay session ends: one state and one transition function ([`End::on`]).
//!
//! ```text
//!   Open ──client EOF──► ClientDone ──client bytes all handed over──► ShutSent
//!    │                       │                                          │
//!    └──upstream ended──► UpstreamDone(reason) ◄──upstream ended──────────┘
//!                            (reason = ClientEof after the client's EOF)
//! ```
//! Any state but `Open` wants the linger timer (`--close-linger`): the surviving direction is
//! flushed under it, and when it fires the session closes with [`End::linger_reason`].
//! `UpstreamDone` is sticky. Immediate closes (resets, protocol errors, the client ending inside
//! a packet) are not states: the relay returns them at once. The relay (`relay`) performs what a
//! transition asks (FIN or WS Close toward the upstream); this file does no I/O.
//! [`client_read_failure`] names a failed read from the client.

use std::io;

use crate::error::CloseReason;
use crate::net::faketls_stream::record_error;

/// The close reason for a read from the client that failed with `e`: `tls-record` when a
/// fake-TLS client sent a record we do not relay, else `client-reset`.
pub fn client_read_failure(e: &io::Error) -> CloseReason {
    if record_error(e).is_some() {
        CloseReason::TlsRecord
    } else {
        CloseReason::ClientReset
    }
}

/// End-of-session state of one relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Both directions open.
    Open,
    /// The client sent EOF; its last bytes are on their way to the upstream.
    ClientDone,
    /// The upstream was told the client is done (TCP FIN, or our WS Close); the upstream's
    /// bytes are still relayed until it ends.
    ShutSent,
    /// The upstream ended (EOF or its WS Close): what it sent is delivered to the client, then
    /// the session closes with this reason.
    UpstreamDone(CloseReason),
}

/// What happened, as fed to [`End::on`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndEvent {
    /// The client's read side returned end of stream.
    ClientEof,
    /// Everything read from the client was handed to the upstream socket.
    UpFlushed,
    /// The upstream ended, for this reason (`UpstreamEof`, `WsClose`, or `ProtocolError` for a
    /// front's Close with a forbidden status, answered with our Close 1002).
    UpstreamEnded(CloseReason),
}

/// What the relay must do after a transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndAction {
    /// Nothing.
    None,
    /// Half-close toward the upstream (FIN on raw TCP, our Close on a WS link).
    ShutUpstream,
}

impl End {
    /// The one transition function. Events that do not apply in a state leave it unchanged.
    pub fn on(self, ev: EndEvent) -> (End, EndAction) {
        match (self, ev) {
            (End::Open, EndEvent::ClientEof) => (End::ClientDone, EndAction::None),
            (End::ClientDone, EndEvent::UpFlushed) => (End::ShutSent, EndAction::ShutUpstream),
            (End::Open, EndEvent::UpstreamEnded(r)) => (End::UpstreamDone(r), EndAction::None),
            // After the client's EOF, the upstream's end is just the answer to it.
            (End::ClientDone | End::ShutSent, EndEvent::UpstreamEnded(_)) => {
                (End::UpstreamDone(CloseReason::ClientEof), EndAction::None)
            }
            (s, _) => (s, EndAction::None),
        }
    }

    /// True while bytes from the client are still read.
    pub fn reads_client(self) -> bool {
        self == End::Open
    }

    /// True while bytes from the upstream are still read.
    pub fn reads_upstream(self) -> bool {
        !matches!(self, End::UpstreamDone(_))
    }

    /// True once one side ended: the linger timer bounds the flush of the other.
    pub fn lingers(self) -> bool {
        self != End::Open
    }

    /// Reason reported if the linger timer fires in this state.
    pub fn linger_reason(self) -> CloseReason {
        match self {
            End::UpstreamDone(r) => r,
            _ => CloseReason::ClientEof,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_first_then_upstream_reports_client_eof() {
        let (s, a) = End::Open.on(EndEvent::ClientEof);
        assert_eq!((s, a), (End::ClientDone, EndAction::None));
        assert!(!s.reads_client() && s.reads_upstream() && s.lingers());
        assert_eq!(
            s.on(EndEvent::ClientEof),
            (End::ClientDone, EndAction::None)
        );
        let (s, a) = s.on(EndEvent::UpFlushed);
        assert_eq!((s, a), (End::ShutSent, EndAction::ShutUpstream));
        assert_eq!(s.on(EndEvent::UpFlushed).1, EndAction::None);
        let (s, _) = s.on(EndEvent::UpstreamEnded(CloseReason::WsClose(1000)));
        assert_eq!(s, End::UpstreamDone(CloseReason::ClientEof));
        assert_eq!(s.linger_reason(), CloseReason::ClientEof);
    }

    #[test]
    fn upstream_first_keeps_its_reason_and_is_sticky() {
        assert!(!End::Open.lingers());
        assert!(End::Open.reads_client());
        let (s, _) = End::Open.on(EndEvent::UpstreamEnded(CloseReason::UpstreamEof));
        assert_eq!(s, End::UpstreamDone(CloseReason::UpstreamEof));
        assert!(!s.reads_client() && !s.reads_upstream() && s.lingers());
        for ev in [
            EndEvent::ClientEof,
            EndEvent::UpFlushed,
            EndEvent::UpstreamEnded(CloseReason::WsClose(1)),
        ] {
            assert_eq!(s.on(ev), (s, EndAction::None));
        }
        assert_eq!(s.linger_reason(), CloseReason::UpstreamEof);
        // Linger in ClientDone (client bytes never flushed) reports the client.
        assert_eq!(End::ClientDone.linger_reason(), CloseReason::ClientEof);
    }
}
