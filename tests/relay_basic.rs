//! First end-to-end checks: resPQ through the ws tier and the tcp tier.
mod common;

use std::time::Duration;

use common::fakedc::{DcConfig, FakeDc};
use common::{client_opts, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::rng::Rng;

#[test]
fn res_pq_through_ws_tier() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let ws = format!("2:{}", dc.handle().addr());
    let proxy = Proxy::start(&["--secret", SECRET, "--dc-ip", &ws, "--tier-order", "ws"]);
    let mut rng = Rng::new().unwrap();
    let a = probe_once(
        &client_opts(proxy.addr(), SECRET, Tag::Intermediate, 2),
        &mut rng,
    );
    assert_eq!(a.outcome, Outcome::Ok, "{a:?}\n{:#?}", proxy.logs());
    assert_eq!(dc.handle().upgrades(), 1);
    let _ = Duration::ZERO;
}

#[test]
fn res_pq_through_tcp_tier() {
    let (_dc, proxy) = common::tcp_dc2_proxy(&[]);
    let mut rng = Rng::new().unwrap();
    let a = probe_once(
        &client_opts(proxy.addr(), SECRET, Tag::Abridged, -2),
        &mut rng,
    );
    assert_eq!(a.outcome, Outcome::Ok, "{a:?}\n{:#?}", proxy.logs());
}
