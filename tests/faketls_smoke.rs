//! Smoke test of fake-TLS (`ee`) end to end: the built proxy with an `ee` and a plain secret on
//! one listener, over the tcp tier to a fake DC on loopback, probed by our own `probe` applet
//! speaking fake-TLS (its client side is `mtproto::faketls::client`; engineer C's
//! tests/faketls_*.rs use an independent client). One quick check that the pieces meet.

mod common;

use std::time::Duration;

use common::{run_bin, tcp_dc2_proxy, SECRET};

/// `ee` + a key + hex("example.com").
const EE: &str = "eefedcba9876543210fedcba98765432106578616d706c652e636f6d";

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn an_ee_client_and_a_plain_one_are_served_on_the_same_port() {
    let (_dc, proxy) = tcp_dc2_proxy(&["--secret", EE]);
    let addr = proxy.addr().to_string();
    for secret in [EE, SECRET] {
        let run = run_bin(
            &[
                "probe",
                &addr,
                "--secret",
                secret,
                "--count",
                "2",
                "--timeout",
                "5s",
            ],
            &[],
            Duration::from_secs(30),
        );
        assert_eq!(
            run.code,
            Some(0),
            "probe with {secret}:\n{}{}\nproxy log:\n{}",
            run.stdout,
            run.stderr,
            proxy.logs().join("\n")
        );
    }
    // Two probes per secret: four session records on DC2 over the tcp tier, the two
    // fake-TLS ones marked as such, none refused as TLS to a plain port.
    let on_dc2 = |e: &serde_json::Value| e["dc"] == "DC2" && e["tier"] == "tcp";
    let served = proxy.wait_sessions(4, WAIT, on_dc2);
    assert_eq!(
        served.len(),
        4,
        "four sessions on DC2 via tcp:\n{}",
        proxy.dump()
    );
    let fake_tls = served.iter().filter(|e| e["fake_tls"] == true).count();
    assert_eq!(fake_tls, 2, "{served:?}\n{}", proxy.dump());
    let refused = proxy.sessions_where(|e| e["reason"] == "tls-to-plain-port");
    assert!(refused.is_empty(), "{refused:?}");
}
