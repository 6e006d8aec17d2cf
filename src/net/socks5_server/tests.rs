//! Unit tests of the SOCKS5 server core: every path and refusal with byte-exact answers, every
//! REP code's reply, byte-by-byte feeding, pipelined messages and payload left unconsumed, and
//! the `--socks5-auth` file grammar.

use super::*;

const V4: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(149, 154, 167, 51)), 443);

fn users() -> Users {
    Users::parse("# test users\nalice:s3cret\n\nbob:pa:ss\n").unwrap()
}

fn connect_v4(addr: [u8; 4], port: u16) -> Vec<u8> {
    let mut m = vec![5, 1, 0, 1];
    m.extend_from_slice(&addr);
    m.extend_from_slice(&port.to_be_bytes());
    m
}

fn connect_name(name: &[u8], port: u16) -> Vec<u8> {
    let mut m = vec![5, 1, 0, 3, name.len() as u8];
    m.extend_from_slice(name);
    m.extend_from_slice(&port.to_be_bytes());
    m
}

fn userpass(user: &[u8], pass: &[u8]) -> Vec<u8> {
    let mut m = vec![1, user.len() as u8];
    m.extend_from_slice(user);
    m.push(pass.len() as u8);
    m.extend_from_slice(pass);
    m
}

/// What a session sees: every step with the bytes to write, in order, feeding `input` as a
/// client would deliver it in `chunk`-byte reads; stops at `Connect`/`Refuse` and returns the
/// bytes left unconsumed.
fn run(
    s: &mut Socks5,
    input: &[u8],
    chunk: usize,
    u: Option<&Users>,
) -> (Vec<Socks5Step>, Vec<u8>) {
    let mut steps = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0;
    loop {
        let (used, step) = s.advance(&buf, u);
        assert!(used <= buf.len());
        buf.drain(..used);
        match step {
            Socks5Step::Need => {
                assert_eq!(used, 0, "Need consumes nothing");
                if fed == input.len() {
                    steps.push(step);
                    return (steps, buf);
                }
                let end = (fed + chunk).min(input.len());
                buf.extend_from_slice(&input[fed..end]);
                fed = end;
            }
            Socks5Step::Send(_) => steps.push(step),
            Socks5Step::Connect(_) | Socks5Step::Refuse(..) => {
                steps.push(step);
                buf.extend_from_slice(&input[fed..]);
                return (steps, buf);
            }
        }
    }
}

fn send(b: &[u8]) -> Socks5Step {
    let mut r = Reply::EMPTY;
    r.bytes[..b.len()].copy_from_slice(b);
    r.len = b.len() as u8;
    Socks5Step::Send(r)
}

fn refused(b: &[u8], why: Refusal) -> Socks5Step {
    let mut r = Reply::EMPTY;
    r.bytes[..b.len()].copy_from_slice(b);
    r.len = b.len() as u8;
    Socks5Step::Refuse(r, why)
}

#[test]
fn no_auth_connect_v4_whole_and_byte_by_byte() {
    let mut input = vec![5, 2, 0, 2];
    input.extend(connect_v4([149, 154, 167, 51], 443));
    for chunk in [1, 2, 3, 100] {
        let mut s = Socks5::new(false);
        let (steps, left) = run(&mut s, &input, chunk, None);
        assert_eq!(
            steps,
            [send(&[5, 0]), Socks5Step::Connect(V4)],
            "chunk {chunk}"
        );
        assert!(left.is_empty());
    }
}

#[test]
fn auth_connect_v6_whole_and_byte_by_byte() {
    let u = users();
    let mut input = vec![5, 2, 0, 2];
    input.extend(userpass(b"bob", b"pa:ss"));
    let mut req = vec![5, 1, 0, 4];
    let v6: Ipv6Addr = "2001:67c:4e8:f004::a".parse().unwrap();
    req.extend_from_slice(&v6.octets());
    req.extend_from_slice(&80u16.to_be_bytes());
    input.extend(&req);
    for chunk in [1, 5, 1000] {
        let mut s = Socks5::new(true);
        let (steps, left) = run(&mut s, &input, chunk, Some(&u));
        let dest = SocketAddr::new(v6.into(), 80);
        let want = [send(&[5, 2]), send(&[1, 0]), Socks5Step::Connect(dest)];
        assert_eq!(steps, want, "chunk {chunk}");
        assert!(left.is_empty());
    }
}

#[test]
fn pipelined_payload_after_the_request_is_not_consumed() {
    let u = users();
    let payload = [0xef, 0x0a, 1, 2, 3, 4];
    let mut input = vec![5, 1, 2];
    input.extend(userpass(b"alice", b"s3cret"));
    input.extend(connect_v4([149, 154, 167, 51], 443));
    input.extend_from_slice(&payload);
    let mut s = Socks5::new(true);
    // All in one read: each call consumes exactly one message.
    let (n, step) = s.advance(&input, Some(&u));
    assert_eq!((n, step), (3, send(&[5, 2])));
    let (m, step) = s.advance(&input[n..], Some(&u));
    assert_eq!((m, step), (14, send(&[1, 0])));
    let (k, step) = s.advance(&input[n + m..], Some(&u));
    assert_eq!((k, step), (10, Socks5Step::Connect(V4)));
    assert_eq!(&input[n + m + k..], payload);
    // Over: nothing more is read.
    assert_eq!(s.advance(&payload, Some(&u)), (0, Socks5Step::Need));
}

#[test]
fn method_choice() {
    // Without users: 00 when offered, whatever else is; 02 alone is not acceptable.
    let cases: [(bool, &[u8], Socks5Step); 6] = [
        (false, &[5, 1, 0], send(&[5, 0])),
        (false, &[5, 3, 2, 1, 0], send(&[5, 0])),
        (
            false,
            &[5, 1, 2],
            refused(&[5, 0xff], Refusal::NoAcceptableMethod),
        ),
        // With users: 02 is required; 00 is never chosen.
        (true, &[5, 2, 0, 2], send(&[5, 2])),
        (
            true,
            &[5, 1, 0],
            refused(&[5, 0xff], Refusal::NoAcceptableMethod),
        ),
        (
            true,
            &[5, 2, 0x80, 1],
            refused(&[5, 0xff], Refusal::NoAcceptableMethod),
        ),
    ];
    for (auth, greeting, want) in cases {
        let mut s = Socks5::new(auth);
        assert_eq!(
            s.advance(greeting, None),
            (greeting.len(), want),
            "{greeting:?}"
        );
    }
}

#[test]
fn garbage_greetings_are_refused() {
    let mut s = Socks5::new(false);
    assert_eq!(
        s.advance(&[4, 1, 0, 80], None).1,
        refused(&[], Refusal::Version(4))
    );
    // A TLS ClientHello or HTTP request on the SOCKS port.
    let mut s = Socks5::new(false);
    assert_eq!(
        s.advance(&[0x16, 3, 1], None).1,
        refused(&[], Refusal::Version(0x16))
    );
    let mut s = Socks5::new(false);
    assert_eq!(
        s.advance(b"GET /", None).1,
        refused(&[], Refusal::Version(b'G'))
    );
    let mut s = Socks5::new(false);
    assert_eq!(
        s.advance(&[5, 0], None),
        (2, refused(&[5, 0xff], Refusal::NoMethods))
    );
    // Refusals are final.
    assert_eq!(s.advance(&[5, 1, 0], None), (0, Socks5Step::Need));
}

#[test]
fn credentials() {
    let u = users();
    let cases: [(Vec<u8>, bool); 7] = [
        (userpass(b"alice", b"s3cret"), true),
        (userpass(b"bob", b"pa:ss"), true),
        (userpass(b"alice", b"pa:ss"), false),
        (userpass(b"alice", b"s3cre"), false),
        (userpass(b"alice", b"s3cret!"), false),
        (userpass(b"mallory", b"s3cret"), false),
        (userpass(b"", b""), false),
    ];
    for (msg, ok) in cases {
        let mut s = Socks5::new(true);
        assert_eq!(s.advance(&[5, 1, 2], Some(&u)).1, send(&[5, 2]));
        let want = if ok {
            send(&[1, 0])
        } else {
            refused(&[1, 1], Refusal::Credentials)
        };
        assert_eq!(s.advance(&msg, Some(&u)), (msg.len(), want), "{msg:?}");
    }
    // Auth required but no user list at hand: every credential is refused.
    let mut s = Socks5::new(true);
    s.advance(&[5, 1, 2], None);
    let msg = userpass(b"alice", b"s3cret");
    assert_eq!(
        s.advance(&msg, None).1,
        refused(&[1, 1], Refusal::Credentials)
    );
    // Wrong sub-negotiation version (a client that sends the request instead).
    let mut s = Socks5::new(true);
    s.advance(&[5, 1, 2], Some(&u));
    let req = connect_v4([1, 2, 3, 4], 443);
    assert_eq!(
        s.advance(&req, Some(&u)),
        (1, refused(&[], Refusal::AuthVersion(5)))
    );
}

#[test]
fn longest_credentials_fit_max_message() {
    let long = "u".repeat(255);
    let text = format!("{long}:{}", "p".repeat(255));
    let u = Users::parse(&text).unwrap();
    let msg = userpass(long.as_bytes(), "p".repeat(255).as_bytes());
    assert_eq!(msg.len(), MAX_MESSAGE);
    let mut s = Socks5::new(true);
    s.advance(&[5, 1, 2], Some(&u));
    assert_eq!(
        s.advance(&msg[..MAX_MESSAGE - 1], Some(&u)),
        (0, Socks5Step::Need)
    );
    assert_eq!(s.advance(&msg, Some(&u)), (MAX_MESSAGE, send(&[1, 0])));
}

fn after_greeting(req: &[u8]) -> (usize, Socks5Step) {
    let mut s = Socks5::new(false);
    assert_eq!(s.advance(&[5, 1, 0], None).1, send(&[5, 0]));
    s.advance(req, None)
}

const REP_HEAD: [u8; 4] = [5, 0, 0, 1];

fn rep_bytes(rep: u8) -> [u8; 10] {
    [5, rep, 0, 1, 0, 0, 0, 0, 0, 0]
}

#[test]
fn commands_other_than_connect_get_rep_07() {
    for cmd in [2u8, 3, 0, 9] {
        let mut req = connect_v4([149, 154, 167, 51], 443);
        req[1] = cmd;
        let want = refused(&rep_bytes(7), Refusal::Command(cmd));
        // Judged from the head: the address need not be there yet.
        assert_eq!(after_greeting(&req[..4]), (4, want), "cmd {cmd}");
        assert_eq!(after_greeting(&req).1, want);
    }
}

#[test]
fn address_types() {
    // 1 and 4 are addresses; 3 only as an IP literal; anything else REP 08.
    for atyp in [0u8, 2, 5, 0xff] {
        let req = [5, 1, 0, atyp, 1, 2, 3, 4, 0, 80];
        let want = refused(&rep_bytes(8), Refusal::AddressType(atyp));
        assert_eq!(after_greeting(&req), (4, want), "atyp {atyp}");
    }
    let literals: [(&[u8], IpAddr); 5] = [
        (b"149.154.167.51", Ipv4Addr::new(149, 154, 167, 51).into()),
        (
            b"2001:b28:f23d:f001::a",
            "2001:b28:f23d:f001::a".parse().unwrap(),
        ),
        (
            b"[2001:b28:f23d:f001::a]",
            "2001:b28:f23d:f001::a".parse().unwrap(),
        ),
        (b"::1", Ipv6Addr::LOCALHOST.into()),
        // IPv4-mapped IPv6 comes out as IPv4 (the DC table's key).
        (
            b"::ffff:149.154.167.51",
            Ipv4Addr::new(149, 154, 167, 51).into(),
        ),
    ];
    for (name, ip) in literals {
        let req = connect_name(name, 443);
        let want = Socks5Step::Connect(SocketAddr::new(ip, 443));
        assert_eq!(after_greeting(&req), (req.len(), want));
    }
    let names: [&[u8]; 8] = [
        b"venus.web.telegram.org",
        b"localhost",
        b"",
        b"149.154.167.051",
        b"149.154.167",
        b"fe80::1%eth0",
        b"[149.154.167.51]",
        &[0xff, 0xfe, b'1'],
    ];
    for name in names {
        let req = connect_name(name, 443);
        let want = refused(&rep_bytes(4), Refusal::Name);
        assert_eq!(after_greeting(&req), (req.len(), want), "{name:?}");
    }
    // Mapped IPv6 as ATYP 4 too.
    let mut req = vec![5, 1, 0, 4];
    req.extend_from_slice(&Ipv4Addr::new(149, 154, 167, 51).to_ipv6_mapped().octets());
    req.extend_from_slice(&443u16.to_be_bytes());
    assert_eq!(after_greeting(&req), (22, Socks5Step::Connect(V4)));
}

#[test]
fn garbage_requests_are_refused() {
    let mut req = connect_v4([149, 154, 167, 51], 443);
    req[2] = 1;
    let want = refused(&rep_bytes(1), Refusal::Reserved(1));
    assert_eq!(after_greeting(&req), (4, want));
    // Wrong version: refused from its first byte, with no answer.
    let want = refused(&[], Refusal::Version(4));
    assert_eq!(after_greeting(&[4]), (1, want));
    assert_eq!(after_greeting(&[4, 1, 0, 1, 9, 9, 9, 9, 0, 80]), (1, want));
    // A client that repeats its greeting: `05 01 00` then its next greeting's `05`.
    let want = refused(&rep_bytes(8), Refusal::AddressType(5));
    assert_eq!(after_greeting(&[5, 1, 0, 5, 1, 0]), (4, want));
}

#[test]
fn every_rep_code_reply_is_byte_exact() {
    let reps = [
        (Rep::Succeeded, 0u8),
        (Rep::GeneralFailure, 1),
        (Rep::NotAllowed, 2),
        (Rep::NetUnreachable, 3),
        (Rep::HostUnreachable, 4),
        (Rep::Refused, 5),
        (Rep::TtlExpired, 6),
        (Rep::CommandNotSupported, 7),
        (Rep::AddrTypeNotSupported, 8),
    ];
    for (rep, code) in reps {
        assert_eq!(reply(rep, None).as_bytes(), rep_bytes(code));
    }
    let bound: SocketAddr = "127.0.0.1:1080".parse().unwrap();
    let mut want = REP_HEAD.to_vec();
    want.extend_from_slice(&[127, 0, 0, 1, 0x04, 0x38]);
    assert_eq!(reply(Rep::Succeeded, Some(bound)).as_bytes(), want);
    let bound: SocketAddr = "[::1]:1080".parse().unwrap();
    let mut want = vec![5, 2, 0, 4];
    want.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    want.extend_from_slice(&[0x04, 0x38]);
    assert_eq!(reply(Rep::NotAllowed, Some(bound)).as_bytes(), want);
    assert_eq!(want.len(), 22);
}

#[test]
fn the_exchange_is_small() {
    assert!(std::mem::size_of::<Socks5>() <= 4);
    assert!(std::mem::size_of::<Reply>() <= 23);
    assert!(std::mem::size_of::<Socks5Step>() <= 40);
}

#[test]
fn refusal_names_are_distinct() {
    let all = [
        Refusal::Version(4),
        Refusal::NoMethods,
        Refusal::NoAcceptableMethod,
        Refusal::AuthVersion(5),
        Refusal::Credentials,
        Refusal::Reserved(1),
        Refusal::Command(2),
        Refusal::AddressType(5),
        Refusal::Name,
    ];
    for (i, a) in all.iter().enumerate() {
        assert!(!a.to_string().is_empty());
        for b in &all[i + 1..] {
            assert_ne!(a.name(), b.name());
        }
    }
    assert_eq!(Refusal::Command(2).to_string(), "SOCKS5 BIND not supported");
    assert_eq!(
        Refusal::Command(3).to_string(),
        "SOCKS5 UDP ASSOCIATE not supported"
    );
}

#[test]
fn users_file_grammar() {
    let u = Users::parse("  # comment\r\nalice:s3cret\r\n\n   \nbob:pa:ss").unwrap();
    assert_eq!(u.len(), 2);
    assert_eq!(u.first(), Some(("alice", "s3cret")));
    assert!(u.check(b"bob", b"pa:ss"));
    assert!(!u.check(b"alice", b"s3cret\r"));
    // Spaces are part of a name or password (only the line end is dropped).
    let u = Users::parse("a b: pw \n").unwrap();
    assert!(u.check(b"a b", b" pw "));
    assert_eq!(format!("{:?}", users()), r#"["alice", "bob"]"#);
}

#[test]
fn users_file_errors_name_the_line() {
    let long = "x".repeat(256);
    let cases = [
        ("alice:pw\nbob\n", "line 2: expected user:password"),
        (":pw", "line 1: empty user name"),
        ("# c\nalice:", "line 2: empty password"),
        (
            "alice:a\n\nalice:b",
            "line 3: user \"alice\" already given on line 1",
        ),
        ("", "no users (expected user:password lines)"),
        (
            "# only comments\n\n",
            "no users (expected user:password lines)",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(Users::parse(text).unwrap_err(), want, "{text:?}");
    }
    let err = Users::parse(&format!("{long}:pw")).unwrap_err();
    assert_eq!(
        err,
        "line 1: user name is 256 bytes, at most 255 (RFC 1929)"
    );
    let err = Users::parse(&format!("u:{long}")).unwrap_err();
    assert_eq!(err, "line 1: password is 256 bytes, at most 255 (RFC 1929)");
}
