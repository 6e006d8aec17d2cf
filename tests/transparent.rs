//! Transparent mode end to end (issue 21 part 2), in a world of network namespaces of the test's
//! own (`common::world`): a LAN client, a router running the proxy with our nftables table
//! (installed and removed by the `firewall` applet, with the real `nft`), and a Telegram world
//! holding DC 2's real addresses and a web address — which exist only inside those namespaces.
//! Clients dial DC addresses as apps do (no proxy configured): a Desktop-style init (DC set) over
//! IPv4, an Android-style init (bytes 60–61 random) over IPv6, plain abridged, and TLS to a web
//! address; the guard closes a connection that reached the port without a redirect and a
//! redirect outside Telegram's ranges; with the proxy stopped and the table removed, clients go
//! direct. Outcomes from session records, `ctl status --json` and the fake DC's own counts.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::ctl::Ctl;
use common::fakedc::{DcConfig, FakeDc};
use common::mtsession::MtSession;
use common::world::{sh_in, World, DC2_V4, DC2_V6, LAN_IFACE, WEB_V4};
use common::{bin, os_rng, wait_until, Proxy, SECRET};
use tg_ws_proxy::mtproto::obfs2::Tag;

const PORT: u16 = 1444;
const T: Duration = Duration::from_secs(10);

fn addr(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), port)
}

/// `tg-ws-proxy firewall ARGS` inside the router namespace; (exit code, stdout + stderr).
fn firewall(w: &World, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", &w.router])
        .arg(bin())
        .arg("firewall")
        .args(args)
        .env("TG_TG_RANGES_URL", "off")
        .output()
        .expect("spawn firewall applet");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// The firewall flags of this world's router.
fn fw_flags() -> Vec<String> {
    vec![
        "--transparent".into(),
        format!("[::]:{PORT}"),
        "--lan-iface".into(),
        LAN_IFACE.into(),
    ]
}

/// A LAN client's TCP connection to `to` (made inside the LAN namespace).
fn lan_connect(w: &World, to: SocketAddr) -> std::io::Result<TcpStream> {
    w.within(&w.lan, || {
        let s = TcpStream::connect_timeout(&to, T)?;
        s.set_read_timeout(Some(T))?;
        s.set_write_timeout(Some(T))?;
        Ok(s)
    })
}

/// An echo server (a stand-in for a Telegram web site) inside the Telegram world.
fn echo_server(w: &World, at: SocketAddr) {
    let l = w.within(&w.tg, || {
        std::net::TcpListener::bind(at).expect("bind echo")
    });
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
}

/// True once a closed reason reached `n` in `ctl status`.
fn closed(status: &serde_json::Value, reason: &str) -> u64 {
    status["counters"]["closed_by_reason"][reason]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn lan_clients_reach_dcs_through_the_transparent_proxy_and_go_direct_without_it() {
    let Some(w) = World::try_new("transparent end to end") else {
        return;
    };
    let dc4 = w.within(&w.tg, || {
        FakeDc::start_tcp_at(addr(DC2_V4, 443), DcConfig::default())
    });
    let dc4 = dc4.expect("fake DC 2 on its IPv4 address");
    let dc6 = w.within(&w.tg, || {
        FakeDc::start_tcp_at(addr(DC2_V6, 443), DcConfig::default())
    });
    let dc6 = dc6.expect("fake DC 2 on its IPv6 address");
    echo_server(&w, addr(WEB_V4, 443));

    // The table first (as the init script does after start): nothing listens yet, so
    // redirected clients are refused until the proxy is up.
    let flags = fw_flags();
    let fl: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut install = vec!["install"];
    install.extend(&fl);
    let (code, text) = firewall(&w, &install);
    assert_eq!(code, Some(0), "firewall install: {text}");
    let listed = sh_in(&w.router, "nft list table inet tg_ws_proxy");
    assert!(listed.contains("redirect to :1444"), "{listed}");

    let ctl = Ctl::new();
    let [c1, c2] = ctl.args();
    let dc_route = format!("2:{DC2_V4}:443");
    let mut args = vec![
        "--secret",
        SECRET,
        "--tier-order",
        "tcp",
        "--tcp-dc-ip",
        &dc_route,
    ];
    args.extend([c1.as_str(), c2.as_str()]);
    args.extend(&fl);
    // A short web request that waits for its answer is relayed at this deadline.
    args.extend(["--handshake-timeout", "1s"]);
    let proxy = w.within(&w.router, || Proxy::start(&args));
    let mut rng = os_rng();

    // Desktop-style: DC 2 written in the init, over IPv4; held open while status is read.
    let s = lan_connect(&w, addr(DC2_V4, 443)).expect("LAN client to DC 2 (v4)");
    let mut desktop = MtSession::direct(s, Tag::Abridged, 2, &mut rng);
    desktop.send_init().unwrap();
    desktop
        .req_pq()
        .expect("resPQ through the transparent proxy (v4)");
    let st = ctl
        .wait(&proxy, T, |s| s["ways"]["transparent"]["sessions"] == 1)
        .unwrap_or_else(|| panic!("a transparent session in status\n{}", proxy.dump()));
    assert_eq!(st["ways"]["transparent"]["listen"], format!("[::]:{PORT}"));
    assert_eq!(st["dcs"]["DC2"], 1, "{st}");
    assert_eq!(st["ways"]["socks5"]["listen"], serde_json::Value::Null);

    // Android-style: bytes 60-61 random (the app writes the DC only with a proxy secret), over
    // IPv6: the exact table wins.
    let s = lan_connect(&w, addr(DC2_V6, 443)).expect("LAN client to DC 2 (v6)");
    let mut android = MtSession::direct(s, Tag::PaddedIntermediate, 2, &mut rng);
    android.init[60] ^= 0x5a;
    android.init[61] ^= 0xa5;
    android.send_init().unwrap();
    android
        .req_pq()
        .expect("resPQ through the transparent proxy (v6, random DC bytes)");

    // Plain abridged: no obfuscation at all.
    let s = lan_connect(&w, addr(DC2_V4, 443)).expect("LAN client, plain abridged");
    let mut plain = MtSession::plain(s, Tag::Abridged, &mut rng);
    plain.send_init().unwrap();
    plain.req_pq().expect("resPQ for a plain abridged client");

    // TLS to a web address: relayed untouched to where the client meant it.
    let mut web = lan_connect(&w, addr(WEB_V4, 443)).expect("LAN client to the web address");
    let hello = b"\x16\x03\x01\x00\x40 not a real hello, but a TLS record header and 64 bytes ....";
    web.write_all(hello).unwrap();
    let mut back = vec![0u8; hello.len()];
    web.read_exact(&mut back).expect("echo through the proxy");
    assert_eq!(&back[..], &hello[..], "web bytes relayed untouched");

    // A request shorter than an init that waits for its answer: relayed at the deadline.
    let mut put = lan_connect(&w, addr(WEB_V4, 443)).expect("LAN client, short PUT");
    let req = b"PUT /x HTTP/1.1\r\n\r\n";
    put.write_all(req).unwrap();
    let mut back = vec![0u8; req.len()];
    put.read_exact(&mut back)
        .expect("the short request relayed at the deadline");
    assert_eq!(&back[..], &req[..]);

    for s in [desktop.stream, android.stream, plain.stream, web, put] {
        drop(s);
    }
    let want = |s: &serde_json::Value, dst: &str| s["way"] == "transparent" && s["dst"] == dst;
    let v4 = format!("{DC2_V4}:443");
    let v6 = format!("[{DC2_V6}]:443");
    let web_dst = format!("{WEB_V4}:443");
    assert!(
        wait_until(T, || proxy.sessions().len() >= 5),
        "five session records\n{}",
        proxy.dump()
    );
    let recs = proxy.sessions();
    let pass4 = recs
        .iter()
        .find(|s| want(s, &v4) && s["relay_mode"] == "passthrough");
    let pass4 = pass4.unwrap_or_else(|| panic!("v4 pass-through record: {recs:?}"));
    assert_eq!(pass4["dc"], "DC2");
    assert_eq!(pass4["dc_source"], "table");
    let pass6 = recs.iter().find(|s| want(s, &v6)).expect("v6 record");
    assert_eq!(
        pass6["dc"], "DC2",
        "the table, not the random bytes: {pass6}"
    );
    assert_eq!(pass6["relay_mode"], "passthrough");
    assert!(
        recs.iter()
            .any(|s| want(s, &v4) && s["relay_mode"] == "plain"),
        "plain record: {recs:?}"
    );
    let webrecs: Vec<_> = recs
        .iter()
        .filter(|s| s["mask_why"] == "not-mtproto")
        .collect();
    assert_eq!(webrecs.len(), 2, "TLS and the short PUT: {recs:?}");
    assert!(
        webrecs.iter().all(|r| r["mask_target"] == web_dst),
        "{webrecs:?}"
    );
    // What the DC saw: the clients' own inits with DC 2 (the Android one patched), and the
    // plain client's fresh relay init.
    let inits = dc4.init_dcs();
    assert!(inits.contains(&(Tag::Abridged, 2)), "{inits:?}");
    assert!(inits.contains(&(Tag::PaddedIntermediate, 2)), "{inits:?}");
    assert_eq!(
        dc6.connections(),
        0,
        "the proxy chose its own upstream (v4)"
    );

    // The guard: a LAN connection straight to the port (no redirect), and a redirect we did not
    // ask for (to an address outside Telegram's ranges), are closed unread.
    let stray = format!(
        "nft add table ip stray; nft add chain ip stray pre '{{ type nat hook prerouting priority dstnat - 1; }}'; \
         nft add rule ip stray pre iifname {LAN_IFACE} ip daddr 10.21.2.2 tcp dport 80 redirect to :{PORT}"
    );
    sh_in(&w.router, &stray);
    for to in [addr("10.21.1.1", PORT), addr("10.21.2.2", 80)] {
        let mut s = lan_connect(&w, to).expect("connect");
        let mut b = [0u8; 1];
        assert!(
            matches!(s.read(&mut b), Ok(0) | Err(_)),
            "closed unread: {to}"
        );
    }
    // An init that opens to no valid tag without a secret: a clear close, nothing relayed.
    let garbage: Vec<u8> = (0..64u32).map(|i| (i * 37 + 11) as u8 ^ 0x5c).collect();
    assert!(matches!(
        tg_ws_proxy::mtproto::direct::classify(&garbage),
        tg_ws_proxy::mtproto::direct::Classified::Bad
    ));
    let inits_before = dc4.init_dcs().len();
    let mut s = lan_connect(&w, addr(DC2_V4, 443)).expect("LAN client with garbage");
    s.write_all(&garbage).unwrap();
    let mut b = [0u8; 1];
    assert!(matches!(s.read(&mut b), Ok(0) | Err(_)), "garbage closed");
    let st = ctl
        .wait(&proxy, T, |s| {
            closed(s, "dst-loop") >= 1
                && closed(s, "not-telegram") >= 1
                && closed(s, "bad-init") >= 1
        })
        .unwrap_or_else(|| panic!("guard closes counted\n{}", proxy.dump()));
    assert_eq!(st["ways"]["transparent"]["sessions"], 0);
    assert_eq!(
        dc4.init_dcs().len(),
        inits_before,
        "nothing of the garbage went upstream"
    );

    // Stop as the init script does: the proxy drains, then the table goes; LAN clients reach
    // Telegram directly (the fake DC answers them itself).
    let mut proxy = proxy;
    assert!(proxy.terminate(T).is_some(), "proxy stops on SIGTERM");
    let (code, text) = firewall(&w, &["remove"]);
    assert_eq!(code, Some(0), "firewall remove: {text}");
    let gone = Command::new("ip")
        .args([
            "netns",
            "exec",
            &w.router,
            "nft",
            "list",
            "table",
            "inet",
            "tg_ws_proxy",
        ])
        .output()
        .unwrap();
    assert!(!gone.status.success(), "our table is removed");
    let before = dc4.connections();
    let s = lan_connect(&w, addr(DC2_V4, 443)).expect("LAN client goes direct");
    let mut direct = MtSession::direct(s, Tag::Intermediate, 2, &mut rng);
    direct.send_init().unwrap();
    direct.req_pq().expect("resPQ straight from the DC");
    assert_eq!(dc4.connections(), before + 1);
    assert!(dc4.init_dcs().contains(&(Tag::Intermediate, 2)));
}

/// Web traffic to a Telegram address is the user's own, relayed untouched: it idles like a
/// session (`--idle-timeout`), not like a masked prober (`--mask-idle-timeout`). Regression: a
/// transparent TLS connection silent for the mask's idle time (60 s by default; a long-poll or
/// an idle WebSocket of a web client) was cut, where going direct it would have lived on.
#[test]
fn a_web_client_through_the_transparent_proxy_idles_like_a_session() {
    let Some(w) = World::try_new("transparent web idle") else {
        return;
    };
    echo_server(&w, addr(WEB_V4, 443));
    let flags = fw_flags();
    let fl: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut install = vec!["install"];
    install.extend(&fl);
    let (code, text) = firewall(&w, &install);
    assert_eq!(code, Some(0), "firewall install: {text}");
    let ctl = Ctl::new();
    let [c1, c2] = ctl.args();
    let mut args = vec![
        "--secret",
        SECRET,
        "--mask-idle-timeout",
        "300ms",
        "--handshake-timeout",
        "1s",
    ];
    args.extend([c1.as_str(), c2.as_str()]);
    args.extend(&fl);
    let proxy = w.within(&w.router, || Proxy::start(&args));
    let mut web = lan_connect(&w, addr(WEB_V4, 443)).expect("LAN client to the web address");
    let hello = b"\x16\x03\x01\x00\x40 not a real hello, but a TLS record header and 64 bytes ....";
    web.write_all(hello).unwrap();
    let mut back = vec![0u8; hello.len()];
    web.read_exact(&mut back).expect("echo through the proxy");
    // A silent client to a DC address: its handshake deadline (1 s) shows the web session has
    // been silent for more than the mask's idle time.
    let _silent = lan_connect(&w, addr(DC2_V4, 443)).expect("silent LAN client");
    ctl.wait(&proxy, T, |s| closed(s, "handshake-timeout") >= 1)
        .unwrap_or_else(|| panic!("no handshake timeout\n{}", proxy.dump()));
    web.write_all(b"still here").unwrap();
    let mut back = [0u8; 10];
    web.read_exact(&mut back)
        .unwrap_or_else(|e| panic!("the web session was cut: {e}\n{}", proxy.dump()));
    assert_eq!(&back, b"still here");
}
