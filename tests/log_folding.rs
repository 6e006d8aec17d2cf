//! Black-box tests of docs/design.md §7 "Logs" (issue 19 §4: logs a router's logread ring
//! survives), where the log lines are the feature, so they are counted: one DC address without
//! a path (IPv6 in a network namespace where only loopback exists, so it fails at once with
//! `ENETUNREACH`) is said once with the address and reason, never as "network unreachable",
//! while the working DC's session lines go on.
//!
//! Owns only this file; the rig is tests/common (netns.rs for the namespace; skipped loudly
//! where namespaces are refused). Loopback only. No fixed sleeps but the measured windows.

mod common;

use std::time::{Duration, Instant};

use common::fakedc::{DcConfig, FakeDc};
use common::{client_opts, os_rng, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;

/// Issue 19 §4: one DC address without a path (IPv6 on a router without IPv6) flipped the
/// global network-down flag and wrote a "network unreachable" / "reachable again" pair at
/// every probe of it (every `--cooldown-base`, ~760 lines an hour at the default 10 s), while
/// the other DCs worked. Now it is said once, with the address and the reason, and never as
/// the network; the working DC's session lines go on. Time is compressed: 0.2 s cooldowns
/// over 6 s are 30 probe rounds, five minutes at the default.
#[test]
fn one_unreachable_dc_address_is_said_once_and_never_as_the_network() {
    common::netns::run_inside(
        "one_unreachable_dc_address_is_said_once_and_never_as_the_network",
        || {
            const WINDOW: Duration = Duration::from_secs(6);
            const V6: &str = "[2001:db8::4]:443";
            let dc = FakeDc::start_tcp(DcConfig::default());
            let dc2 = format!("2:{}", dc.addr());
            let dc4 = format!("4:{V6}");
            let p = common::tcp_tier_proxy(
                &dc2,
                &[
                    "--tcp-dc-ip",
                    &dc4,
                    "--startup-probes",
                    "on",
                    "--cooldown-base",
                    "0.2",
                    "--probe-timeout",
                    "1",
                    "--stats-interval",
                    "0",
                ],
            );
            let mut sessions = 0;
            let began = Instant::now();
            // The measured window: DC 2's clients keep working while DC 4's address is probed
            // every cooldown base.
            while began.elapsed() < WINDOW {
                let opts = client_opts(p.addr(), SECRET, Tag::Intermediate, 2);
                assert_eq!(probe_once(&opts, &mut os_rng()).outcome, Outcome::Ok);
                sessions += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            let said = p.lines_with(&[V6, "unreachable (network-unreachable)"]);
            let network = p.lines_with(&["network unreachable ("]).len()
                + p.lines_with(&["network reachable again"]).len();
            eprintln!(
                "{:.1}s: {} line(s) about {V6}, {network} network line(s), {sessions} DC2 \
                 sessions\n{}",
                began.elapsed().as_secs_f64(),
                said.len(),
                said.join("\n")
            );
            assert_eq!(said.len(), 1, "said once with the address\n{}", p.dump());
            assert_eq!(network, 0, "one address is not the network\n{}", p.dump());
            assert!(
                p.lines_with(&["] route tcp:DC4", " down for "]).is_empty(),
                "cooled down\n{}",
                p.dump()
            );
            // The working DC's lines stay: one per session.
            let dc2_lines = p.lines_with(&["session 127.0.0.1:", " DC2 via tcp "]).len();
            assert!(
                common::wait_until(Duration::from_secs(5), || {
                    p.lines_with(&["session 127.0.0.1:", " DC2 via tcp "]).len() >= sessions
                }),
                "{dc2_lines} of {sessions} DC2 session lines\n{}",
                p.dump()
            );
        },
    );
}
