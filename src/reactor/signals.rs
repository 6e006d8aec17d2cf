//! Signals into the loop: SIGHUP (reload), SIGTERM and SIGINT (drain, then exit).
//!
//! The only user of `signal-hook-mio`: its handlers write to a self-pipe that is registered
//! with the reactor's poll under [`token::SIGNAL`](crate::token::SIGNAL); the loop reads what
//! arrived here and acts on it ([`Signal`]). Nothing runs inside a signal handler but the pipe
//! write. SIGPIPE is not touched: the Rust runtime sets it to ignored before `main`, and a
//! broken pipe stays an `EPIPE` on the socket that caused it.

use std::io;

use mio::{Interest, Registry};
use signal_hook_mio::v1_0::Signals;

use crate::token::SIGNAL;

/// What a delivered signal asks of the reactor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGHUP: reload the configuration.
    Reload,
    /// SIGTERM or SIGINT: stop accepting and drain (a second one: exit at once).
    Stop,
}

/// The registered signal pipe.
pub struct SignalPipe {
    signals: Signals,
}

impl SignalPipe {
    /// Installs the handlers for SIGHUP, SIGTERM and SIGINT and registers the pipe with
    /// `registry` under `token::SIGNAL`.
    ///
    /// Errors: the handler or the pipe could not be set up (an OS error, reported as such).
    pub fn new(registry: &Registry) -> io::Result<SignalPipe> {
        let mut signals = Signals::new([libc::SIGHUP, libc::SIGTERM, libc::SIGINT])?;
        registry.register(&mut signals, SIGNAL, Interest::READABLE)?;
        Ok(SignalPipe { signals })
    }

    /// Signals delivered since the last call, in a fixed order (every Stop after a Reload of
    /// the same batch); each kind at most once per call.
    pub fn take(&mut self) -> Vec<Signal> {
        let mut reload = false;
        let mut stops = 0usize;
        for sig in self.signals.pending() {
            match sig {
                libc::SIGHUP => reload = true,
                _ => stops += 1,
            }
        }
        let mut out = Vec::with_capacity(2);
        if reload {
            out.push(Signal::Reload);
        }
        // Two stop signals in one batch mean "exit at once" just like two batches.
        out.extend(std::iter::repeat_n(Signal::Stop, stops.min(2)));
        out
    }
}
