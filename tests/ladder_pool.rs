//! Warm pools: a hot route keeps pre-upgraded upstreams; a client takes one instead of dialling;
//! entries are aged out before the front's idle timeout and refilled in the background.
mod common;

use std::time::Duration;

use common::fakedc::{DcConfig, FakeDc};
use common::{client_opts, wait_until, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::rng::Rng;

fn start(dc: &FakeDc, extra: &[&str]) -> Proxy {
    let ws = format!("2:{}", dc.addr());
    let mut args = vec!["--secret", SECRET, "--dc-ip", &ws, "--tier-order", "ws"];
    args.extend_from_slice(extra);
    Proxy::start(&args)
}

#[test]
fn hot_route_fills_its_pool_and_the_next_client_takes_a_warm_upstream() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let proxy = start(&dc, &["--pool-size", "2", "--pool-max-age", "30"]);
    let mut rng = Rng::new().unwrap();
    let opts = client_opts(proxy.addr(), SECRET, Tag::Intermediate, 2);
    assert_eq!(probe_once(&opts, &mut rng).outcome, Outcome::Ok);
    // The first session made the route hot: a warm upstream follows in the background (one per
    // session start in the demand window, up to --pool-size; demand is 1 so far).
    assert!(
        wait_until(Duration::from_secs(5), || dc.upgrades() >= 2),
        "pool never filled: {} upgrades\n{}",
        dc.upgrades(),
        proxy.logs().join("\n")
    );
    let before = dc.upgrades();
    let a = probe_once(&opts, &mut rng);
    assert_eq!(a.outcome, Outcome::Ok, "{a:?}");
    // The session used a warm upstream: its init arrived on an already-upgraded connection.
    let pooled = proxy.wait_event("session", Duration::from_secs(5), |e| {
        e["target"]
            .as_str()
            .is_some_and(|t| t.ends_with(" (pooled)"))
    });
    assert!(pooled.is_some(), "{}", proxy.dump());
    assert!(
        !proxy.events("pool_ready").is_empty(),
        "no pool_ready event\n{}",
        proxy.dump()
    );
    // …and the pool is topped up again.
    assert!(wait_until(Duration::from_secs(5), || dc.upgrades() > before));
}

#[test]
fn pooled_upstreams_are_aged_out_and_refilled() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let proxy = start(&dc, &["--pool-size", "1", "--pool-max-age", "1"]);
    let mut rng = Rng::new().unwrap();
    let opts = client_opts(proxy.addr(), SECRET, Tag::Intermediate, 2);
    assert_eq!(probe_once(&opts, &mut rng).outcome, Outcome::Ok);
    // Max age 1 s, sweep every second: within a few seconds several generations of warm
    // upstreams have come and gone, and the fake front never holds more than pool + slack.
    assert!(
        wait_until(Duration::from_secs(8), || dc.upgrades() >= 4),
        "no refills after age-out: {} upgrades\n{}",
        dc.upgrades(),
        proxy.logs().join("\n")
    );
    assert!(
        dc.live_sessions() <= 2,
        "{} live sessions at the front",
        dc.live_sessions()
    );
}

#[test]
fn pool_size_zero_never_dials_in_the_background() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let proxy = start(&dc, &["--pool-size", "0"]);
    let mut rng = Rng::new().unwrap();
    let opts = client_opts(proxy.addr(), SECRET, Tag::Intermediate, 2);
    for _ in 0..3 {
        assert_eq!(probe_once(&opts, &mut rng).outcome, Outcome::Ok);
    }
    // Three sessions, three upgrades, nothing pooled; once all three ended, still three.
    let ended = proxy.wait_sessions(3, Duration::from_secs(3), |_| true);
    assert_eq!(ended.len(), 3, "{}", proxy.dump());
    assert!(proxy.events("pool_ready").is_empty(), "{}", proxy.dump());
    assert_eq!(dc.upgrades(), 3);
}
