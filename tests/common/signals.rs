//! Helpers shared by the signal-driven black-box tests (drain, review cases): a signal to the
//! child, waiting for its exit, a log line that must show up, and a live relaying session.

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use tg_ws_proxy::applet::probe::MtClient;
use tg_ws_proxy::mtproto::obfs2::Tag;

use super::{client_opts, wait_until, Proxy, SECRET};

/// How long a log line may take to show up in `must_log`.
pub const LOG_WAIT: Duration = Duration::from_secs(10);

pub fn signal(proxy: &Proxy, sig: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid; no memory is shared.
    let rc = unsafe { libc::kill(proxy.pid() as libc::pid_t, sig) };
    assert_eq!(rc, 0, "kill: {}", io::Error::last_os_error());
}

pub fn wait_exit(proxy: &mut Proxy, timeout: Duration) -> Option<ExitStatus> {
    let mut status = None;
    wait_until(timeout, || {
        status = proxy.try_wait();
        status.is_some()
    });
    status
}

pub fn must_log(proxy: &Proxy, needle: &str) {
    assert!(
        proxy.wait_log(needle, LOG_WAIT),
        "no {needle:?}:\n{}",
        proxy.logs().join("\n")
    );
}

/// A relaying session: connected through the proxy, one echo exchanged.
pub fn live_session(proxy: &Proxy) -> MtClient {
    let mut c = MtClient::connect(&client_opts(proxy.addr(), SECRET, Tag::Intermediate, 2))
        .expect("connect through the proxy");
    echo(&mut c, 1, proxy);
    c
}

/// One packet to the fake DC and its echo back (the 0xA5 lead makes it an echo).
pub fn echo(c: &mut MtClient, n: u8, proxy: &Proxy) {
    let payload = [0xA5, n, 2, 3, 4, 5, 6, n];
    c.send_packet(&payload).expect("send echo");
    let got = c
        .recv_packet()
        .unwrap_or_else(|e| panic!("echo {n}: {e}\n{}", proxy.logs().join("\n")));
    assert_eq!(got, payload, "echo {n}");
}
