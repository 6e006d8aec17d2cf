//! Smoke test of fake-TLS (`ee`) end to end: the built proxy with an `ee` and a plain secret on
//! one listener, over the tcp tier to a fake DC on loopback, probed by our own `probe` applet
//! speaking fake-TLS (its client side is `mtproto::faketls::client`; engineer C's
//! tests/faketls_*.rs use an independent client). One quick check that the pieces meet.

mod common;

use std::time::Duration;

use common::{run_bin, tcp_dc2_proxy, wait_until, SECRET};

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
    // Two probes per secret: four close lines, the two fake-TLS ones marked as such.
    let closed = wait_until(WAIT, || proxy.count_log(" DC2 via tcp ") == 4);
    assert!(closed, "four close lines:\n{}", proxy.dump());
    assert_eq!(
        proxy.count_log(" fake-TLS DC2 via tcp "),
        2,
        "{}",
        proxy.dump()
    );
    assert_eq!(proxy.count_log("tls-to-plain-port"), 0);
}
