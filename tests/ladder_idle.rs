//! An intermediary closing an idle session is a normal end, not a route failure (the ladder
//! issue: "Idle closes by an intermediary are a normal end").
mod common;

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use common::fakedc::{DcConfig, FakeDc, Fault};
use common::{client_opts, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, MtClient, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::mtproto::packet;
use tg_ws_proxy::rng::Rng;

#[test]
fn front_closing_an_idle_session_ends_it_cleanly_and_keeps_the_route_up() {
    let dc = FakeDc::start_tls_ws(DcConfig::with_fault(Fault::CloseWhenIdle(
        Duration::from_millis(400),
    )));
    let ws = format!("2:{}", dc.addr());
    let proxy = Proxy::start(&[
        "--secret",
        SECRET,
        "--dc-ip",
        &ws,
        "--tier-order",
        "ws",
        "-v",
    ]);
    let mut rng = Rng::new().unwrap();
    let opts = client_opts(proxy.addr(), SECRET, Tag::Intermediate, 2);
    // A real exchange first, then silence.
    let mut c = MtClient::connect_with(&opts, &mut rng).expect("connect");
    let nonce = [7u8; 16];
    c.send_packet(&packet::req_pq_multi(
        &nonce,
        packet::msg_id(1_700_000_000_000),
    ))
    .unwrap();
    let reply = c.recv_packet().expect("resPQ");
    assert!(packet::parse_res_pq(&reply, &nonce).is_ok());
    let t = Instant::now();
    // The front hangs up after 400 ms of silence: the client sees EOF promptly after that.
    let err = c.recv_packet().expect_err("the idle session must end");
    assert_eq!(err.kind(), ErrorKind::UnexpectedEof, "{err}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    let rec = proxy.wait_event("session", Duration::from_secs(3), |_| true);
    let rec = rec.unwrap_or_else(|| panic!("no session record\n{}", proxy.dump()));
    assert_eq!(rec["closed_by"], "upstream", "{rec}");
    // The route was not blamed: no down or suspect event, and the next client goes through it.
    assert_eq!(probe_once(&opts, &mut rng).outcome, Outcome::Ok);
    assert!(
        proxy
            .wait_sessions(2, Duration::from_secs(3), |_| true)
            .len()
            >= 2,
        "{}",
        proxy.dump()
    );
    for to in ["down", "suspect"] {
        let evs = proxy.route_events("ws:DC2", to);
        assert!(evs.is_empty(), "an idle close made the route {to}: {evs:?}");
    }
}
