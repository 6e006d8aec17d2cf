//! Black-box: SIGTERM/SIGINT drain. The first stop signal closes the listener, writes the
//! stats line and lets live sessions finish for at most `--drain-timeout`; the process exits 0
//! when the last one ends or at the deadline (the rest are cut); a second signal exits at once.
//!
//! Owns only this file; the rig lives in tests/common. Real sockets on 127.0.0.1, signals
//! through `kill(2)` on the child, waits on conditions with deadlines.

mod common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::signals::{echo, live_session, must_log, signal, wait_exit};
use common::tcp_dc2_proxy;

/// Slack on top of a drain deadline for the exit to be seen.
const MARGIN: Duration = Duration::from_secs(5);

#[test]
fn sigterm_lets_a_live_session_finish_then_exits_0_after_a_final_stats_line() {
    let (_dc, mut proxy) = tcp_dc2_proxy(&["--drain-timeout", "20s"]);
    let mut c = live_session(&proxy);
    signal(&proxy, libc::SIGTERM);
    must_log(&proxy, "shutdown: draining 1 sessions for at most 20s");
    must_log(&proxy, "stats: active=1/");
    // Accepting stopped: the listener is closed.
    let refused = TcpStream::connect_timeout(&proxy.addr(), Duration::from_secs(2));
    assert!(refused.is_err(), "a new client was accepted while draining");
    // The live session goes on relaying.
    echo(&mut c, 2, &proxy);
    assert!(proxy.try_wait().is_none(), "exited with a session open");
    drop(c);
    let status = wait_exit(&mut proxy, MARGIN).expect("exit once the last session ended");
    assert!(status.success(), "{status:?}");
    must_log(&proxy, "shutdown: done");
    assert_eq!(proxy.count_log("cut at --drain-timeout"), 0);
}

#[test]
fn a_session_still_open_at_drain_timeout_is_cut_and_the_process_exits_0() {
    let (_dc, mut proxy) = tcp_dc2_proxy(&["--drain-timeout", "700ms"]);
    let mut c = live_session(&proxy);
    let t0 = Instant::now();
    signal(&proxy, libc::SIGTERM);
    let status = wait_exit(&mut proxy, Duration::from_millis(700) + MARGIN)
        .expect("exit within the drain timeout and a margin");
    let took = t0.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(
        took >= Duration::from_millis(600),
        "did not wait for the drain: {took:?}"
    );
    must_log(&proxy, "shutdown: 1 sessions cut at --drain-timeout");
    // The client sees its session end.
    assert!(c.recv_packet().is_err(), "session still open after exit");
}

#[test]
fn a_second_stop_signal_exits_at_once() {
    let (_dc, mut proxy) = tcp_dc2_proxy(&["--drain-timeout", "60s"]);
    let _c = live_session(&proxy);
    signal(&proxy, libc::SIGTERM);
    must_log(&proxy, "shutdown: draining 1 sessions");
    let t0 = Instant::now();
    signal(&proxy, libc::SIGINT);
    let status = wait_exit(&mut proxy, MARGIN).expect("second signal exits at once");
    assert!(status.success(), "{status:?}");
    assert!(t0.elapsed() < MARGIN);
    must_log(&proxy, "shutdown: second signal");
}

#[test]
fn sigint_with_no_session_exits_0_at_once() {
    let (_dc, mut proxy) = tcp_dc2_proxy(&["--drain-timeout", "60s"]);
    signal(&proxy, libc::SIGINT);
    let status = wait_exit(&mut proxy, MARGIN).expect("nothing to drain: exit");
    assert!(status.success(), "{status:?}");
    must_log(&proxy, "shutdown: draining 0 sessions");
    must_log(&proxy, "shutdown: done");
}
