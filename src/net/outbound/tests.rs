//! Unit tests of the outbound proxy: URL grammar, bypass list, the SOCKS5 and CONNECT cores.

use std::net::SocketAddr;

use super::http::{base64, Connect, MAX_RESPONSE};
use super::socks5::Socks5;
use super::*;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn urls_parse_with_percent_decoded_credentials() {
    let p = OutboundProxy::parse("socks5://al%40ice:p%3Ass@127.0.0.1:1080").unwrap();
    assert_eq!(p.scheme, Scheme::Socks5);
    assert_eq!(p.addr, addr("127.0.0.1:1080"));
    assert_eq!(p.auth, Some(("al@ice".into(), "p:ss".into())));
    // The password never shows.
    assert_eq!(p.to_string(), "socks5://al@ice:***@127.0.0.1:1080");
    assert!(!format!("{p:?}").contains("p:ss"));

    let p = OutboundProxy::parse("HTTP://[::1]:3128/").unwrap();
    assert_eq!(
        (p.scheme, p.addr, p.auth),
        (Scheme::Http, addr("[::1]:3128"), None)
    );
    let p = OutboundProxy::parse("socks5h://localhost:9050").unwrap();
    assert_eq!(
        (p.scheme, p.addr),
        (Scheme::Socks5h, addr("127.0.0.1:9050"))
    );
    assert_eq!(parse_flag("none").unwrap(), None);
    assert_eq!(parse_flag("DIRECT").unwrap(), None);
}

#[test]
fn bad_urls_are_refused_with_a_reason() {
    let err = |u: &str| OutboundProxy::parse(u).unwrap_err();
    assert!(err("https://127.0.0.1:443").contains("https:// proxies are not supported"));
    assert!(err("socks4://127.0.0.1:1080").contains("unknown proxy scheme"));
    assert!(err("127.0.0.1:1080").contains("expected socks5://"));
    assert!(err("socks5://127.0.0.1").contains("needs a port"));
    assert!(err("socks5://127.0.0.1:0").contains("bad proxy port"));
    assert!(err("socks5://127.0.0.1:99999").contains("bad proxy port"));
    assert!(err("socks5://bad..name:1080").contains("invalid label"));
    assert!(err("socks5://-x.lan:1080").contains("invalid label"));
    assert!(err("socks5://0.0.0.0:1080").contains("not an address to connect to"));
    // A mistyped address is refused, never looked up as a name.
    assert!(err("socks5://192.168.1.300:1080").contains("not a valid IP address"));
    assert!(err("socks5://10.0.0:1080").contains("not a valid IP address"));
    assert!(err("socks5://[proxy.lan]:1080").contains("not an IPv6 address"));
    assert!(err("socks5://[localhost]:1080").contains("not an IPv6 address"));
    assert!(err("http://127.0.0.1:8080/path").contains("no path"));
    assert!(err("socks5://user@127.0.0.1:1080").contains("user:pass"));
    assert!(err("socks5://u:%zz@127.0.0.1:1080").contains("percent escape"));
    assert!(err("socks5://:pass@127.0.0.1:1080").contains("1 to 255"));
    let long = "x".repeat(256);
    assert!(err(&format!("socks5://{long}:p@127.0.0.1:1")).contains("1 to 255"));
}

#[test]
fn a_refused_url_never_echoes_the_password() {
    // The error reaches stderr, and on a reload the log: the password must not be in it.
    for url in [
        "socks5:/u:hunter2@127.0.0.1:1080",
        "socks5//u:hunter2@127.0.0.1:1080",
        "socks5://u:hun%zzter2@127.0.0.1:1080",
        "socks5://u:hunter2%@127.0.0.1:1080",
        "socks5://u:hunter2@127.0.0.1:99999",
        "socks5://u:hunter2@bad..lan:1080",
        "socks5://u:hunter2@127.0.0.1",
        "ftp://u:hunter2@127.0.0.1:21",
        "http://u:hunter2@127.0.0.1:8080/path",
    ] {
        let e = OutboundProxy::parse(url).unwrap_err();
        assert!(
            !e.contains("hunter2") && !e.contains("hun%zz"),
            "{url}: {e}"
        );
        let e = parse_flag(url).unwrap_err();
        assert!(
            !e.contains("hunter2") && !e.contains("hun%zz"),
            "{url}: {e}"
        );
    }
}

#[test]
fn bypass_matches_names_suffixes_ips_and_cidrs() {
    let items: Vec<String> = ["Worker.Example", ".lan", "10.0.0.0/8", "::1", "192.0.2.7"]
        .map(String::from)
        .to_vec();
    let b = Bypass::parse(&items).unwrap();
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert!(b.matches(ip("1.1.1.1"), Some("worker.example")));
    assert!(!b.matches(ip("1.1.1.1"), Some("x.worker.example")));
    assert!(b.matches(ip("1.1.1.1"), Some("router.lan")));
    assert!(b.matches(ip("1.1.1.1"), Some("lan")));
    assert!(!b.matches(ip("1.1.1.1"), Some("plan")));
    assert!(b.matches(ip("10.200.3.4"), None));
    assert!(b.matches(ip("::ffff:10.1.1.1"), None));
    assert!(!b.matches(ip("11.0.0.1"), None));
    assert!(b.matches(ip("::1"), None));
    assert!(b.matches(ip("192.0.2.7"), None));
    assert!(!b.matches(ip("192.0.2.8"), None));
    let all = Bypass::parse(&["*".to_string()]).unwrap();
    assert!(all.matches(ip("8.8.8.8"), None));
    for bad in ["10.0.0.0/33", "1.2.3.4:80", "a b", "./x", "x/8"] {
        assert!(check_bypass_item(bad).is_err(), "{bad} accepted");
    }
}

#[test]
fn via_skips_bypassed_targets_and_the_proxy_itself() {
    let o = Outbound::new(
        Some(&OutboundProxy::parse("socks5://127.0.0.1:1080").unwrap()),
        &["127.0.0.9".to_string()],
    )
    .unwrap()
    .unwrap();
    assert!(o.via(addr("127.0.0.9:443"), None).is_none());
    assert!(o.via(addr("127.0.0.1:1080"), None).is_none());
    let v = o
        .via(addr("127.0.0.2:443"), Some("kws2.web.telegram.org"))
        .unwrap();
    assert_eq!(v.target, Target::Addr(addr("127.0.0.2:443")));
    // A name left for the proxy to resolve.
    let unresolved = SocketAddr::new(UNRESOLVED, 443);
    let v = o.via(unresolved, Some("w.example")).unwrap();
    assert_eq!(v.target, Target::Name("w.example".into(), 443));
    assert_eq!(v.target.to_string(), "w.example:443");
    assert!(Outbound::new(None, &[]).unwrap().is_none());
    assert!(Outbound::new(None, &["1.2.3.4:5".into()]).is_err());
}

/// Drives `core` through `answers`, one exchange at a time: checks what it sends, then feeds
/// the answer in `want()`-sized pieces. Returns the last result.
fn socks_run(core: &mut Socks5, exchanges: &[(&[u8], &[u8])]) -> Result<Progress, ProxyError> {
    let mut last = Ok(Progress::More);
    for (sends, answer) in exchanges {
        assert_eq!(core.pending(), *sends);
        let n = core.pending().len();
        core.sent(n);
        let mut rest = *answer;
        while !rest.is_empty() {
            let take = core.want().min(rest.len());
            assert!(take > 0, "core wants nothing while answer bytes remain");
            last = Ok(core.feed(&rest[..take])?);
            rest = &rest[take..];
        }
    }
    last
}

#[test]
fn socks5_without_auth_connects_ipv4_and_reads_exactly_the_reply() {
    let mut s = Socks5::new(&Target::Addr(addr("149.154.167.51:443")), None);
    let r = socks_run(
        &mut s,
        &[
            (&[5, 1, 0], &[5, 0]),
            (
                &[5, 1, 0, 1, 149, 154, 167, 51, 1, 187],
                &[5, 0, 0, 1, 127, 0, 0, 1, 0x30, 0x39],
            ),
        ],
    );
    assert_eq!(r, Ok(Progress::Done));
    assert_eq!(s.want(), 0);
    assert!(s.pending().is_empty());
}

#[test]
fn socks5_user_pass_ipv6_and_domain_bound_address() {
    let mut s = Socks5::new(&Target::Addr(addr("[2001:db8::1]:80")), Some(("bob", "pw")));
    let mut req = vec![5, 1, 0, 4];
    req.extend_from_slice(
        &"2001:db8::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    req.extend_from_slice(&[0, 80]);
    let r = socks_run(
        &mut s,
        &[
            (&[5, 2, 0, 2], &[5, 2]),
            (&[1, 3, b'b', b'o', b'b', 2, b'p', b'w'], &[1, 0]),
            (&req, &[5, 0, 0, 3, 3, b'a', b'b', b'c', 0, 1]),
        ],
    );
    assert_eq!(r, Ok(Progress::Done));
}

#[test]
fn socks5_failures_have_distinct_classes() {
    // Wrong password.
    let mut s = Socks5::new(&Target::Addr(addr("127.0.0.1:1")), Some(("u", "bad")));
    let r = socks_run(
        &mut s,
        &[
            (&[5, 2, 0, 2], &[5, 2]),
            (&[1, 1, b'u', 3, b'b', b'a', b'd'], &[1, 1]),
        ],
    );
    assert!(matches!(&r, Err(ProxyError::Auth(_))), "{r:?}");
    assert_eq!(r.unwrap_err().failure(), Failure::ProxyAuth);
    // Auth needed and we have none.
    let mut s = Socks5::new(&Target::Addr(addr("127.0.0.1:1")), None);
    let r = socks_run(&mut s, &[(&[5, 1, 0], &[5, 0xFF])]);
    assert!(matches!(r, Err(ProxyError::Auth(_))));
    // Destination refused (reply 5).
    let mut s = Socks5::new(&Target::Addr(addr("127.0.0.1:1")), None);
    let r = socks_run(
        &mut s,
        &[
            (&[5, 1, 0], &[5, 0]),
            (&[5, 1, 0, 1, 127, 0, 0, 1, 0, 1], &[5, 5, 0, 1]),
        ],
    );
    assert_eq!(r, Err(ProxyError::Socks(5)));
    assert_eq!(ProxyError::Socks(5).failure(), Failure::ProxySocks(5));
    // Network and host unreachable from the proxy are the path's facts, as from a local
    // connect: the same classes, which cool no route.
    assert_eq!(ProxyError::Socks(3).failure(), Failure::NetUnreachable);
    assert_eq!(ProxyError::Socks(4).failure(), Failure::HostUnreachable);
    assert!(ProxyError::Socks(3).failure().is_network());
    assert!(ProxyError::Socks(4).failure().is_network());
    assert!(!ProxyError::Socks(2).failure().is_network());
    assert!(ProxyError::Socks(5)
        .to_string()
        .contains("connection refused"));
    // Not SOCKS at all (an HTTP proxy answering).
    let mut s = Socks5::new(&Target::Addr(addr("127.0.0.1:1")), None);
    let r = socks_run(&mut s, &[(&[5, 1, 0], b"HT")]);
    assert!(matches!(r, Err(ProxyError::Protocol(_))));
    assert_eq!(r.unwrap_err().failure(), Failure::ProxyProtocol);
    // A method we did not offer, a bad address type, too many bytes.
    let mut s = Socks5::new(&Target::Addr(addr("127.0.0.1:1")), None);
    assert!(matches!(s.feed(&[5, 1]), Err(ProxyError::Protocol(_))));
    let mut s = Socks5::new(&Target::Addr(addr("127.0.0.1:1")), None);
    assert!(matches!(s.feed(&[5, 0, 5]), Err(ProxyError::Protocol(_))));
    let mut s = Socks5::new(&Target::Addr(addr("127.0.0.1:1")), None);
    let r = socks_run(
        &mut s,
        &[
            (&[5, 1, 0], &[5, 0]),
            (&[5, 1, 0, 1, 127, 0, 0, 1, 0, 1], &[5, 0, 0, 9]),
        ],
    );
    assert!(matches!(r, Err(ProxyError::Protocol(_))));
}

/// Feeds `answer` to a CONNECT core in `want()`-sized pieces.
fn http_run(c: &mut Connect, answer: &[u8]) -> Result<Progress, ProxyError> {
    let mut rest = answer;
    let mut last = Ok(Progress::More);
    while !rest.is_empty() {
        let take = c.want().min(rest.len());
        last = Ok(c.feed(&rest[..take])?);
        rest = &rest[take..];
    }
    last
}

#[test]
fn connect_request_carries_host_and_basic_auth() {
    let c = Connect::new(
        &Target::Addr(addr("127.0.0.1:443")),
        Some(("Aladdin", "open sesame")),
    );
    assert_eq!(
        std::str::from_utf8(c.pending()).unwrap(),
        "CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\
         Proxy-Authorization: Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==\r\n\r\n"
    );
    let c = Connect::new(&Target::Addr(addr("[::1]:80")), None);
    assert!(std::str::from_utf8(c.pending())
        .unwrap()
        .starts_with("CONNECT [::1]:80 HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"));
    assert_eq!(base64(b""), "");
    assert_eq!(base64(b"f"), "Zg==");
    assert_eq!(base64(b"fo"), "Zm8=");
    assert_eq!(base64(b"foo"), "Zm9v");
}

#[test]
fn connect_response_is_read_to_the_blank_line_and_no_further() {
    let mut c = Connect::new(&Target::Addr(addr("127.0.0.1:443")), None);
    let head = b"HTTP/1.0 200 Connection established\r\nProxy-agent: x\r\n\r\n";
    // Feeding byte runs of want() never crosses the end of the head.
    let mut fed = 0;
    while fed < head.len() {
        let n = c.want();
        assert!(fed + n <= head.len(), "want() would read past the head");
        let r = c.feed(&head[fed..fed + n]).unwrap();
        fed += n;
        if r == Progress::Done {
            break;
        }
    }
    assert_eq!(fed, head.len());
    assert_eq!(c.want(), 0);
}

#[test]
fn connect_statuses_map_to_classes() {
    let run = |resp: &[u8]| {
        http_run(
            &mut Connect::new(&Target::Addr(addr("127.0.0.1:1")), None),
            resp,
        )
    };
    assert_eq!(run(b"HTTP/1.1 204 OK\r\n\r\n"), Ok(Progress::Done));
    let r = run(b"HTTP/1.1 407 Proxy Authentication Required\r\nX: y\r\n\r\n");
    assert_eq!(r.unwrap_err().failure(), Failure::ProxyAuth);
    assert_eq!(
        run(b"HTTP/1.0 403 Access violation\r\n\r\n"),
        Err(ProxyError::Http(403))
    );
    assert_eq!(
        run(b"HTTP/1.1 502 Bad Gateway\r\n\r\n"),
        Err(ProxyError::Http(502))
    );
    assert_eq!(ProxyError::Http(403).failure(), Failure::ProxyHttp(403));
    for garbage in [
        &b"SSH-2.0-x\r\n\r\n"[..],
        b"HTTP/1.1 2000 x\r\n\r\n",
        b"HTTP/1.1 abc x\r\n\r\n",
    ] {
        assert!(
            matches!(run(garbage), Err(ProxyError::Protocol(_))),
            "{garbage:?}"
        );
    }
    // An endless head is cut at the limit.
    let mut c = Connect::new(&Target::Addr(addr("127.0.0.1:1")), None);
    let junk = vec![b'a'; MAX_RESPONSE + 10];
    let r = http_run(&mut c, &junk);
    assert!(
        matches!(r, Err(ProxyError::Protocol(ref m)) if m.contains("over")),
        "{r:?}"
    );
}

#[test]
fn activate_says_whether_the_setting_changed() {
    let p = OutboundProxy::parse("http://127.0.0.1:3128").unwrap();
    let mut active: Active = None;
    assert!(activate(&mut active, Some(&p), &[]));
    assert_eq!(active.as_deref().map(|o| &o.proxy), Some(&p));
    assert!(
        !activate(&mut active, Some(&p), &[]),
        "the same setting again"
    );
    assert!(activate(&mut active, Some(&p), &["10.0.0.0/8".into()]));
    assert!(activate(&mut active, None, &[]));
    assert!(active.is_none());
}

#[test]
fn socks5h_asks_for_the_name_and_only_for_names_not_bypassed() {
    let mut s = Socks5::new(&Target::Name("w.example".into(), 443), None);
    let mut req = vec![5, 1, 0, 3, 9];
    req.extend_from_slice(b"w.example");
    req.extend_from_slice(&[1, 187]);
    let r = socks_run(
        &mut s,
        &[
            (&[5, 1, 0], &[5, 0]),
            (&req, &[5, 0, 0, 1, 0, 0, 0, 0, 0, 0]),
        ],
    );
    assert_eq!(r, Ok(Progress::Done));
    let c = Connect::new(&Target::Name("w.example".into(), 443), None);
    assert!(std::str::from_utf8(c.pending())
        .unwrap()
        .starts_with("CONNECT w.example:443 HTTP/1.1\r\n"));

    let p = OutboundProxy::parse("socks5h://127.0.0.1:1080").unwrap();
    let o = Outbound::new(Some(&p), &[".lan".into(), "0.0.0.0/0".into()]).unwrap();
    assert_eq!(remote_name(o.as_ref(), "w.example"), Some(UNRESOLVED));
    assert_eq!(
        remote_name(o.as_ref(), "box.lan"),
        None,
        "a bypassed name is resolved locally"
    );
    let p = OutboundProxy::parse("socks5://127.0.0.1:1080").unwrap();
    let o = Outbound::new(Some(&p), &[]).unwrap();
    assert_eq!(
        remote_name(o.as_ref(), "w.example"),
        None,
        "socks5:// resolves locally"
    );
    assert_eq!(remote_name(None, "w.example"), None);
}

#[test]
fn a_proxy_given_by_name_is_unresolved_until_the_resolver_answers() {
    let p = OutboundProxy::parse("socks5://u:secret@Proxy.LAN.:1080").unwrap();
    assert_eq!(p.host.as_deref(), Some("proxy.lan"));
    assert_eq!(p.addr, SocketAddr::new(UNRESOLVED, 1080));
    assert_eq!(p.to_string(), "socks5://u:***@proxy.lan:1080");
    let mut active: Active = Outbound::new(Some(&p), &[]).unwrap().map(Rc::new);
    assert_eq!(proxy_host(active.as_deref()).as_deref(), Some("proxy.lan"));
    // Unresolved: dials still go through it (and fail there as the proxy's failure), even a
    // socks5h placeholder target on the proxy's own port is not taken for the proxy itself.
    let o = active.clone().unwrap();
    let via = o.via(SocketAddr::new(UNRESOLVED, 1080), Some("w.example"));
    assert_eq!(
        via.map(|v| v.target),
        Some(Target::Name("w.example".into(), 1080))
    );
    // Background work waits for the address; a bypassed destination does not need it.
    assert!(waits_for_proxy(
        active.as_deref(),
        addr("127.0.0.1:443"),
        None
    ));
    // No answer yet: nothing changes.
    assert!(!resolve_proxy(&mut active, |_| None));
    assert_eq!(active.as_ref().unwrap().proxy.addr.ip(), UNRESOLVED);
    // An answer for that name: later dials connect there; the same answer again changes nothing.
    let mut asked = Vec::new();
    assert!(resolve_proxy(&mut active, |h| {
        asked.push(h.to_string());
        Some("127.0.0.9".parse().unwrap())
    }));
    assert_eq!(asked, ["proxy.lan"]);
    assert_eq!(active.as_ref().unwrap().proxy.addr, addr("127.0.0.9:1080"));
    assert_eq!(
        o.proxy.addr.ip(),
        UNRESOLVED,
        "a copy taken before keeps its own"
    );
    assert!(!waits_for_proxy(
        active.as_deref(),
        addr("127.0.0.1:443"),
        None
    ));
    assert!(!resolve_proxy(&mut active, |_| Some(
        "127.0.0.9".parse().unwrap()
    )));
    // A reload with the same proxy keeps the address learnt; another name starts unresolved.
    assert!(!activate(&mut active, Some(&p), &[]));
    assert_eq!(active.as_ref().unwrap().proxy.addr, addr("127.0.0.9:1080"));
    let other = OutboundProxy::parse("socks5://other.lan:1080").unwrap();
    assert!(activate(&mut active, Some(&other), &[]));
    assert_eq!(active.as_ref().unwrap().proxy.addr.ip(), UNRESOLVED);
    // A proxy given as an address has nothing to resolve.
    let mut active: Active = Outbound::new(
        Some(&OutboundProxy::parse("socks5://127.0.0.1:1").unwrap()),
        &[],
    )
    .unwrap()
    .map(Rc::new);
    assert_eq!(proxy_host(active.as_deref()), None);
    assert!(!resolve_proxy(&mut active, |_| Some(
        "127.0.0.9".parse().unwrap()
    )));
}
