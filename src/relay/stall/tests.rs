//! The freeze watch's rules, one test each: the two forms of the freeze against the three
//! client behaviours (ask once and wait, give up and reconnect, re-ask), and the sessions that
//! must never be taken for frozen (idle after an ack, pings answered, a slow reader, a slow
//! upload, a user leaving mid-download).

use super::*;

const B: StallBounds = StallBounds {
    silent_ms: 8_000,
    ack_ms: 5_000,
    give_up_ms: 2_000,
};

/// The kernel's view of a frozen path: `n` unanswered, the last ACK `ago` ms back.
fn dead(n: u8, ago: u64) -> Option<TcpView> {
    Some(TcpView {
        unanswered: n,
        last_ack_ms: ago,
        ..TcpView::default()
    })
}

/// The kernel's view while an upload drains: bytes of ours queued, `acked` taken so far, the
/// last ACK `ago` ms back.
fn draining(acked: u64, ago: u64) -> Option<TcpView> {
    Some(TcpView {
        unanswered: 0,
        last_ack_ms: ago,
        queued: true,
        acked,
    })
}

/// A session that asked for a file at 0 and got its first 16 KiB at 50, mid-reply since.
fn frozen_mid_reply() -> StallWatch {
    let mut w = StallWatch::new(B, 0);
    assert_eq!(w.observe(0, (100, 0), false, false), Effect::None);
    assert_eq!(w.observe(50, (100, 16_384), true, false), Effect::None);
    w
}

/// Runs the checks the shell would run until `until`, feeding `view(now, armed_at)`; returns
/// the verdict and when it came.
fn run(
    w: &mut StallWatch,
    until: u64,
    mut view: impl FnMut(u64, Option<u64>) -> Option<TcpView>,
) -> Option<(Freeze, u64)> {
    let mut armed = None;
    while let Some(at) = w.due() {
        if at > until {
            return None;
        }
        let tcp = if w.wants_tcp(at) {
            view(at, armed)
        } else {
            None
        };
        let (effect, verdict) = w.check(at, tcp);
        if effect == Effect::ArmProbe {
            armed = Some(at);
        }
        if let Some(f) = verdict {
            return Some((f, at));
        }
    }
    None
}

#[test]
fn kernel_freeze_asked_once_is_seen_within_ten_seconds_of_the_last_byte() {
    let mut w = frozen_mid_reply();
    assert_eq!(w.due(), Some(1_050), "one step after the last byte");
    // Every packet from the server is dropped: the last ACK came with the last byte (50), our
    // keepalive probes go unanswered from the arming on.
    let got = run(&mut w, 60_000, |now, armed| {
        let probes = armed.map_or(0, |a| ((now - a) / 1_000 + 1) as u8);
        dead(probes, now - 50)
    });
    let (f, at) = got.expect("a verdict");
    assert_eq!(f, Freeze::NoAck);
    assert!(at - 50 <= 10_000 && at - 50 >= B.ack_ms, "{at}");
}

#[test]
fn kernel_freeze_with_a_client_that_re_asks_is_seen_from_the_retransmissions() {
    let mut w = frozen_mid_reply();
    // The client re-asks every 2 s from 2 050 on; its bytes are never acknowledged
    // (retransmitted every 600 ms or so), nor are the keepalive probes before them.
    let view = |now: u64, armed: Option<u64>| {
        let probes = armed.map_or(0, |a| (now - a) / 1_000);
        let retrans = now.saturating_sub(2_050) / 600;
        dead((probes + retrans).min(9) as u8, now - 50)
    };
    let mut up = 100;
    let mut verdict = None;
    for t in (2_050..20_000).step_by(2_000) {
        verdict = run(&mut w, t - 1, view);
        if verdict.is_some() {
            break;
        }
        up += 80;
        w.observe(t, (up, 16_384), true, false);
    }
    let (f, at) = verdict.expect("a verdict");
    assert_eq!(f, Freeze::NoAck);
    assert!(at - 50 <= 10_000, "{at}");
}

#[test]
fn middlebox_freeze_asked_once_is_seen_at_the_silence_bound() {
    let mut w = frozen_mid_reply();
    // Our probes are ACKed by the middlebox: the kernel finds the path alive.
    let got = run(&mut w, 60_000, |now, armed| match armed {
        None => dead(0, now - 50),
        Some(_) => dead(0, 100),
    });
    assert_eq!(got, Some((Freeze::Silent, 50 + B.silent_ms)));
}

#[test]
fn a_client_that_gives_up_inside_a_reply_is_a_freeze_and_one_leaving_a_live_download_is_not() {
    let mut w = frozen_mid_reply();
    assert_eq!(run(&mut w, 4_900, |_, _| dead(0, 0)), None);
    assert_eq!(w.at_close(5_000, true, None), Some(Freeze::GaveUp));
    // Judged once: the close after the linger does not judge again.
    assert_eq!(w.at_close(7_000, true, None), None);
    // A client that left 1 s into the silence did not give up; the linger that follows its
    // EOF does not make it one.
    let mut w = frozen_mid_reply();
    assert_eq!(w.at_close(1_050, true, None), None);
    assert_eq!(w.at_close(3_050, true, None), None);
    // Bytes were still coming 10 ms before the user closed the app.
    let mut w = frozen_mid_reply();
    w.observe(4_990, (100, 300_000), true, false);
    assert_eq!(w.at_close(5_000, true, None), None);
    // The upstream or we ended it: not the client giving up.
    let mut w = frozen_mid_reply();
    assert_eq!(w.at_close(5_000, false, None), None);
    // A reply completed, then the client left after a quiet spell (the path answered).
    let mut w = frozen_mid_reply();
    w.observe(100, (100, 20_000), false, false);
    assert_eq!(
        run(&mut w, 59_999, |now, armed| dead(
            0,
            armed.map_or(now, |a| now - a - 5)
        )),
        None
    );
    assert_eq!(w.at_close(60_000, true, dead(0, 50_000)), None);
}

#[test]
fn middlebox_freeze_at_a_packet_boundary_with_a_client_that_re_asks() {
    // The reply ended whole; the next request is never answered, the client re-asks every 3 s
    // (each re-ask would push a latest-send bound back for ever).
    let mut w = StallWatch::new(B, 0);
    w.observe(0, (100, 16_384), false, false);
    let mut up = 100;
    let mut verdict = None;
    for t in (1_000..60_000).step_by(3_000) {
        up += 120;
        w.observe(t, (up, 16_384), false, false);
        verdict = run(&mut w, t + 2_999, |_, armed| {
            dead(0, armed.map_or(5_000, |_| 10))
        });
        if verdict.is_some() {
            break;
        }
    }
    assert_eq!(verdict, Some((Freeze::Silent, 1_000 + 2 * B.silent_ms)));
}

#[test]
fn an_idle_session_that_ended_on_an_ack_is_never_frozen() {
    let mut w = StallWatch::new(B, 0);
    w.observe(0, (100, 5_000), false, false);
    // The client acknowledges what came; the server has nothing to say for ten minutes.
    w.observe(300, (180, 5_000), false, false);
    let got = run(&mut w, 600_000, |now, armed| match armed {
        None => dead(0, now - 310),
        // The keepalive probe is ACKed.
        Some(a) => dead(0, now - a - 5),
    });
    assert_eq!(got, None);
    assert_eq!(w.due(), None, "nothing left to check");
    assert_eq!(w.at_close(600_000, true, None), None);
}

/// The kernel's view of a live path: the probe armed at `armed` was answered 5 ms later.
fn alive(now: u64, armed: Option<u64>) -> Option<TcpView> {
    dead(0, armed.map_or(0, |a| (now - a).saturating_sub(5)))
}

#[test]
fn pings_answered_keep_a_quiet_session_alive() {
    let mut w = StallWatch::new(B, 0);
    let mut t = 0;
    let (mut up, mut down) = (100, 1_000);
    for _ in 0..20 {
        // Ping, pong 60 ms later, then quiet for a minute: one kernel check per quiet spell.
        up += 48;
        t += 60_000;
        w.observe(t, (up, down), false, false);
        assert_eq!(run(&mut w, t + 59, alive), None);
        down += 48;
        w.observe(t + 60, (up, down), false, false);
        assert_eq!(run(&mut w, t + 59_999, alive), None);
        assert_eq!(w.due(), None, "the quiet spell was checked once");
    }
}

#[test]
fn kernel_freeze_at_a_packet_boundary_is_seen_though_the_client_does_not_visibly_wait() {
    // The request was acknowledged and answered in part, whole packets only, before every
    // packet from the server began to be dropped: nothing looks outstanding.
    let mut w = StallWatch::new(B, 0);
    w.observe(0, (100, 0), false, false);
    w.observe(50, (100, 12_288), false, false);
    let got = run(&mut w, 60_000, |now, armed| {
        let probes = armed.map_or(0, |a| ((now - a) / 1_000 + 1) as u8);
        dead(probes, now - 50)
    });
    let (f, at) = got.expect("a verdict");
    assert_eq!(f, Freeze::NoAck);
    assert!(at - 50 <= 10_000, "{at}");
    // A client that gives up first: its close, with the probes unanswered, is the verdict.
    let mut w = StallWatch::new(B, 0);
    w.observe(0, (100, 0), false, false);
    w.observe(50, (100, 12_288), false, false);
    assert_eq!(run(&mut w, 4_900, |now, _| dead(1, now - 50)), None);
    assert!(w.armed());
    assert_eq!(
        w.at_close(5_000, true, dead(4, 4_950)),
        Some(Freeze::GaveUp)
    );
}

#[test]
fn a_slow_reader_is_not_a_frozen_upstream() {
    let mut w = StallWatch::new(B, 0);
    w.observe(0, (100, 16_384), true, true);
    w.observe(1_000, (200, 16_384), true, true);
    w.observe(2_000, (300, 16_384), true, true);
    assert_eq!(w.due(), None);
    assert_eq!(w.at_close(30_000, true, None), None);
}

#[test]
fn a_slow_upload_is_not_a_freeze() {
    // A 512 KiB part trickling up for 20 s, answered right after its last byte.
    let mut w = StallWatch::new(B, 0);
    w.observe(0, (0, 100), false, false);
    for s in 1..=20u64 {
        w.observe(s * 1_000, (s * 26_000, 100), false, false);
        assert_eq!(run(&mut w, s * 1_000 + 999, alive), None, "{s}");
    }
    w.observe(20_300, (520_000, 150), false, false);
    assert_eq!(run(&mut w, 80_000, alive), None);
    assert_eq!(w.due(), None);
}

#[test]
fn bytes_down_end_the_wait_and_relax_an_armed_keepalive() {
    let mut w = frozen_mid_reply();
    let (effect, _) = w.check(1_050, dead(0, 1_000));
    assert_eq!(effect, Effect::ArmProbe);
    assert_eq!(w.observe(1_500, (100, 40_000), true, false), Effect::Relax);
    assert_eq!(w.due(), Some(2_500), "the next wait starts afresh");
}

#[test]
fn without_a_kernel_view_the_silence_bound_still_holds() {
    let mut w = frozen_mid_reply();
    let got = run(&mut w, 60_000, |_, _| None);
    assert_eq!(got, Some((Freeze::Silent, 50 + B.silent_ms)));
}

#[test]
fn a_replayed_session_counts_from_its_new_upstream() {
    let mut w = StallWatch::new(B, 5_000).after(700, 0);
    assert_eq!(w.due(), None, "the replay is not the client asking again");
    w.observe(5_100, (700, 0), false, false);
    assert_eq!(w.due(), None);
}

#[test]
fn zero_bounds_switch_the_checks_off() {
    let off = StallBounds::default();
    let mut w = StallWatch::new(off, 0);
    w.observe(0, (100, 16_384), true, false);
    for t in 1..10u64 {
        w.observe(t * 1_000, (100 + t * 100, 16_384), true, false);
    }
    assert_eq!(w.due(), None);
    assert_eq!(w.at_close(100_000, true, dead(5, 99_000)), None);
}

#[test]
fn one_verdict_per_session() {
    let mut w = frozen_mid_reply();
    assert_eq!(w.check(8_050, None), (Effect::None, Some(Freeze::Silent)));
    assert_eq!(w.check(9_000, None), (Effect::None, None));
    assert_eq!(w.due(), None);
    assert_eq!(w.at_close(20_000, true, None), None);
}

#[test]
fn an_upload_still_going_out_is_not_a_freeze_until_the_peer_stops_taking_it() {
    // Review finding: a 512 KiB part read from the client in 2 s sat in the upstream socket
    // and drained over a slow uplink for 16 s; the bound after the latest send fired 8 s after
    // the proxy read the last of it, while the DC was still receiving the request.
    let mut w = StallWatch::new(B, 0);
    w.observe(0, (0, 100), false, false);
    w.observe(1_000, (300_000, 100), false, false);
    w.observe(2_000, (524_288, 100), false, false);
    // The peer takes ~32 KiB a second until 18 000, then answers at once.
    let view = |now: u64, _armed: Option<u64>| {
        let acked = (now.min(18_000) * 32).min(524_288 + 64);
        if now < 18_000 {
            draining(acked, 20)
        } else {
            dead(0, now - 18_000)
        }
    };
    assert_eq!(run(&mut w, 17_999, view), None);
    w.observe(18_050, (524_288, 200), false, false);
    assert_eq!(run(&mut w, 80_000, alive), None);
    // Answered at 18 050; had the answer not come, the bound counts from the drain's end.
    let mut w = StallWatch::new(B, 0);
    w.observe(0, (0, 100), false, false);
    w.observe(1_000, (300_000, 100), false, false);
    w.observe(2_000, (524_288, 100), false, false);
    let (f, at) = run(&mut w, 80_000, view).expect("a verdict");
    assert_eq!(f, Freeze::Silent);
    assert!(
        (18_000 + B.silent_ms..=18_000 + B.silent_ms + 1_000).contains(&at),
        "{at}"
    );
    // Bytes queued that the peer stops taking (it ACKs, takes nothing): no excuse, the
    // verdict comes one step after the bound.
    let mut w = StallWatch::new(B, 0);
    w.observe(0, (0, 100), false, false);
    w.observe(1_000, (300_000, 100), false, false);
    w.observe(2_000, (524_288, 100), false, false);
    let (f, at) = run(&mut w, 80_000, |_, _| draining(200_000, 10)).expect("a verdict");
    assert_eq!(f, Freeze::Silent);
    assert_eq!(at, 2_000 + B.silent_ms + B.step_ms());
}

#[test]
fn a_drain_followed_without_a_kernel_view_is_dropped_not_spun_on() {
    let mut w = StallWatch::new(B, 0);
    w.observe(0, (0, 100), false, false);
    w.observe(1_000, (300_000, 100), false, false);
    w.observe(2_000, (524_288, 100), false, false);
    let mut acked = 0;
    let mut checks = 0;
    // The upload drains until 15 000; then the socket can no longer be read.
    let got = run(&mut w, 80_000, |now, _| {
        checks += 1;
        acked += 32_000;
        (now < 15_000).then(|| draining(acked, 20)).flatten()
    });
    assert_eq!(got.map(|(f, _)| f), Some(Freeze::Silent));
    assert!(checks < 40, "{checks} samples");
}

#[test]
fn the_kernel_keeps_probing_until_past_the_no_ack_bound() {
    // Probes one a second from one second of quiet: the kernel gives up at 1 + count s, after
    // the verdict (ack bound plus a step).
    for ack_ms in [0, 600, 5_000, 12_000, 500_000] {
        let b = StallBounds { ack_ms, ..B };
        let give_up_ms = 1_000 + 1_000 * u64::from(b.probe_count());
        assert!(
            give_up_ms > ack_ms + 2 * b.step_ms() || b.probe_count() == 127,
            "{ack_ms}"
        );
    }
    assert_eq!(B.probe_count(), 8);
}
