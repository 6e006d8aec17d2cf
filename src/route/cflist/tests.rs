//! Unit tests of the shared list core: decoding, validation, the accept rule, the cache
//! format, the schedule, URL parsing and the HTTP response parser. Every name here is made up.

use super::http::{request, request_accepting, HttpError, Outcome, Response};
use super::*;

#[test]
fn decoding_shifts_letters_back_by_their_count_and_swaps_the_suffix() {
    // 3 letters: each goes back 3 (wrapping), digits and '-' stay.
    assert_eq!(decode_entry("abc.com"), "xyz.co.uk");
    assert_eq!(decode_entry("Ab-1.com"), "Yz-1.co.uk");
    // 26 letters: a full turn.
    let full = "abcdefghijklmnopqrstuvwxyz";
    assert_eq!(
        decode_entry(&format!("{full}.com")),
        format!("{full}.co.uk")
    );
    // Not ending in .com: unchanged.
    assert_eq!(decode_entry("plain.example.org"), "plain.example.org");
    for name in ["pool-alpha-test.co.uk", "x1.co.uk", "made-up-bravo.co.uk"] {
        let enc = encode_entry(name).unwrap();
        assert!(enc.ends_with(".com"), "{enc}");
        assert_ne!(enc, name);
        assert_eq!(decode_entry(&enc), name);
    }
    assert_eq!(encode_entry("a.example.org"), None);
}

#[test]
fn host_name_rules() {
    for ok in ["a.co.uk", "x-1.example.org", "a1.b2", "kws2.made-up.co.uk"] {
        assert!(valid_host(ok), "{ok}");
    }
    let long_label = format!("{}.org", "a".repeat(64));
    let long_name = format!("{}org", "abcdefghi.".repeat(26));
    for bad in [
        "",
        "localhost",
        ".a.org",
        "a.org.",
        "a..org",
        "-a.org",
        "a-.org",
        "a_b.org",
        "a.1",
        "1.2.3.4",
        "a.o",
        "A.org",
        long_label.as_str(),
        long_name.as_str(),
    ] {
        assert!(!valid_host(bad), "{bad:?}");
    }
}

#[test]
fn a_list_is_decoded_validated_deduplicated_and_accepted_with_three_names() {
    let a = encode_entry("pool-alpha-test.co.uk").unwrap();
    let b = encode_entry("pool-bravo-test.co.uk").unwrap();
    let text = format!(
        "# comment\n\n  {a}  \r\n{b}\nBAD_NAME.com\n{a}\nplain-charlie.example.org\n#x.com\n"
    );
    let d = decode_list(&text);
    assert_eq!(d.entries, 5);
    assert_eq!(
        d.domains,
        [
            "pool-alpha-test.co.uk",
            "pool-bravo-test.co.uk",
            "plain-charlie.example.org"
        ]
    );
    assert_eq!(accept(d.clone()).unwrap().domains, d.domains);
    // Two valid names are not enough, however many entries there are.
    let short = decode_list(&format!("{a}\n{b}\nbad_1.com\nbad_2.com\n"));
    let why = accept(short).unwrap_err();
    assert!(why.contains("2 valid host name(s) of 4 entries"), "{why}");
    assert!(accept(decode_list("")).is_err());
}

/// Issue 19 §4: a list longer than [`MAX_DOMAINS`] was cut silently. The valid, distinct
/// names past the cap are counted (duplicates and invalid entries are not), and the summary
/// the log line and `ctl status` show says how many were kept and dropped.
#[test]
fn names_past_the_cap_are_counted_as_dropped() {
    let mut text = String::new();
    for i in 0..100 {
        text.push_str(&encode_entry(&format!("pool-{i}-test.co.uk")).unwrap());
        text.push('\n');
    }
    // Past the cap: a duplicate of a dropped name and an invalid one count for nothing.
    text.push_str(&encode_entry("pool-99-test.co.uk").unwrap());
    text.push_str("\nBAD_NAME.com\n");
    let d = decode_list(&text);
    assert_eq!(
        (d.domains.len(), d.dropped, d.entries),
        (MAX_DOMAINS, 36, 102)
    );
    let a = accept(d).unwrap();
    assert_eq!(a.dropped, 36);
    assert_eq!(
        a.summary(),
        "accepted 64 domains, dropped 36 more (at most 64 are taken)"
    );
    let small = accept(decode_list(&encoded_three())).unwrap();
    assert_eq!(small.summary(), "accepted 3 domains");
}

fn encoded_three() -> String {
    ["a-x.co.uk", "b-x.co.uk", "c-x.co.uk"]
        .iter()
        .map(|n| encode_entry(n).unwrap() + "\n")
        .collect()
}

#[test]
fn cache_round_trip_and_foreign_files_are_ignored() {
    let names: Vec<String> = ["a.co.uk", "b.co.uk", "c.example.org"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let text = cache_text(&names);
    assert_eq!(parse_cache(&text).domains, names);
    // A decoded name ending in .co.uk is not decoded again.
    assert_eq!(accept(parse_cache(&text)).unwrap().domains, names);
    assert!(parse_cache("a.co.uk\nb.co.uk\nc.co.uk\n")
        .domains
        .is_empty());
}

#[test]
fn refresh_is_jittered_and_failures_back_off_up_to_the_refresh_interval() {
    let mut rng = Rng::from_seed([7; 48]);
    let mut s = Schedule::new(100_000, 1_000);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..50 {
        let at = s.after_success(1_000, &mut rng) - 1_000;
        assert!((80_000..=120_000).contains(&at), "{at}");
        seen.insert(at);
    }
    assert!(seen.len() > 10, "jitter comes from the rng: {seen:?}");
    let waits: Vec<u64> = (0..10).map(|_| s.after_failure(0, &mut rng)).collect();
    assert!((800..=1_200).contains(&waits[0]), "{waits:?}");
    assert!((1_600..=2_400).contains(&waits[1]), "{waits:?}");
    assert!((3_200..=4_800).contains(&waits[2]), "{waits:?}");
    assert!(
        waits[9] <= 120_000 && waits[9] >= 80_000,
        "capped: {waits:?}"
    );
    assert_eq!(s.failures, 10);
    s.after_success(0, &mut rng);
    assert_eq!(s.failures, 0);
    assert!(
        s.after_failure(0, &mut rng) <= 1_200,
        "a success resets the backoff"
    );
}

#[test]
fn sources_and_urls() {
    assert_eq!(parse_source("off").unwrap(), None);
    assert_eq!(
        parse_source("/etc/tg-ws-proxy/list.txt").unwrap(),
        Some(Source::File("/etc/tg-ws-proxy/list.txt".into()))
    );
    let u = parse_url("https://List.Example.com:8443/a/b.txt?x=1#frag").unwrap();
    assert_eq!(
        (u.host.as_str(), u.port, u.path.as_str()),
        ("list.example.com", 8443, "/a/b.txt?x=1")
    );
    assert_eq!(u.to_string(), "https://list.example.com:8443/a/b.txt?x=1");
    let d = parse_url(crate::config::DEFAULT_CF_DOMAIN_LIST).unwrap();
    assert_eq!((d.port, d.path.ends_with(".txt")), (443, true));
    assert_eq!(parse_url("https://127.0.0.1").unwrap().path, "/");
    for bad in [
        "http://a.example.com/x",
        "ftp://a.example.com/",
        "https://",
        "https://a b/",
        "https://a.example.com:0/",
        "https://a.example.com:99999/",
        "https://u@a.example.com/",
    ] {
        assert!(parse_source(bad).is_err(), "{bad}");
    }
    assert!(parse_source("").is_err());
}

fn url() -> Url {
    parse_url("https://list.example.com:4443/l.txt").unwrap()
}

fn feed_all(r: &mut Response, text: &[u8], step: usize) -> Result<Option<Outcome>, HttpError> {
    for c in text.chunks(step) {
        if let Some(o) = r.feed(c)? {
            return Ok(Some(o));
        }
    }
    Ok(None)
}

#[test]
fn request_bytes() {
    let r = String::from_utf8(request(&url(), "cb=abc")).unwrap();
    assert!(r.starts_with("GET /l.txt?cb=abc HTTP/1.1\r\n"), "{r}");
    assert!(r.contains("\r\nHost: list.example.com:4443\r\n"), "{r}");
    assert!(r.contains("\r\nUser-Agent: tg-ws-proxy\r\n"), "{r}");
    assert!(r.contains("\r\nConnection: close\r\n"), "{r}");
    assert!(r.ends_with("\r\n\r\n"));
}

#[test]
fn a_request_for_another_media_type_and_a_required_content_type() {
    let r = String::from_utf8(request_accepting(&url(), "", "application/dns-message")).unwrap();
    assert!(r.contains("\r\nAccept: application/dns-message\r\n"), "{r}");
    assert!(!r.contains("text/plain"), "{r}");
    let want = "application/dns-message";
    let ok = b"HTTP/1.1 200 OK\r\nContent-Type: Application/DNS-Message; x=1\r\nContent-Length: 2\r\n\r\nab";
    let mut r = Response::new(url(), 100).requiring_type(want);
    assert_eq!(r.feed(ok).unwrap(), Some(Outcome::Body(b"ab".to_vec())));
    let html = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 2\r\n\r\nab";
    let mut r = Response::new(url(), 100).requiring_type(want);
    assert_eq!(
        r.feed(html),
        Err(HttpError::ContentType(Some("text/html".into()), want))
    );
    let none = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab";
    let mut r = Response::new(url(), 100).requiring_type(want);
    assert_eq!(r.feed(none), Err(HttpError::ContentType(None, want)));
    // Not required: any type is taken; a non-200 is its status whatever the type.
    let mut r = Response::new(url(), 100);
    assert_eq!(r.feed(html).unwrap(), Some(Outcome::Body(b"ab".to_vec())));
    let mut r = Response::new(url(), 100).requiring_type(want);
    let e = b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\n\r\n";
    assert_eq!(r.feed(e).unwrap(), Some(Outcome::Status(502)));
}

#[test]
fn bodies_by_length_chunked_and_close_in_any_split() {
    let len = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloXX";
    let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n";
    for step in [1, 3, 1000] {
        let mut r = Response::new(url(), 100);
        assert_eq!(
            feed_all(&mut r, len, step).unwrap(),
            Some(Outcome::Body(b"hello".to_vec()))
        );
        let mut r = Response::new(url(), 100);
        assert_eq!(
            feed_all(&mut r, chunked, step).unwrap(),
            Some(Outcome::Body(b"hello".to_vec()))
        );
    }
    let mut r = Response::new(url(), 100);
    assert_eq!(r.feed(b"HTTP/1.0 200 OK\r\n\r\nhel").unwrap(), None);
    assert_eq!(r.feed(b"lo").unwrap(), None);
    assert_eq!(r.eof().unwrap(), Outcome::Body(b"hello".to_vec()));
    // A length-framed body cut short is truncated, not accepted.
    let mut r = Response::new(url(), 100);
    assert_eq!(
        r.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhel")
            .unwrap(),
        None
    );
    assert_eq!(r.eof(), Err(HttpError::Truncated));
    let mut r = Response::new(url(), 100);
    assert_eq!(r.eof(), Err(HttpError::Truncated));
}

#[test]
fn limits_statuses_redirects_and_garbage() {
    let mut r = Response::new(url(), 4);
    assert_eq!(
        r.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"),
        Err(HttpError::TooLarge(4))
    );
    let mut r = Response::new(url(), 4);
    assert_eq!(
        r.feed(b"HTTP/1.1 200 OK\r\n\r\nhello"),
        Err(HttpError::TooLarge(4))
    );
    let mut r = Response::new(url(), 4);
    assert_eq!(
        r.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n3\r\n"),
        Err(HttpError::TooLarge(4))
    );
    let mut r = Response::new(url(), 4);
    let huge = vec![b'a'; http::MAX_HEAD + 1];
    assert_eq!(r.feed(&huge), Err(HttpError::HeadTooLarge));
    let mut r = Response::new(url(), 4);
    assert_eq!(
        r.feed(b"HTTP/1.1 429 Too Many\r\nRetry-After: 5\r\n\r\n")
            .unwrap(),
        Some(Outcome::Status(429))
    );
    let mut r = Response::new(url(), 4);
    assert_eq!(
        r.feed(b"HTTP/1.1 302 Found\r\nLocation: /other.txt\r\n\r\n")
            .unwrap(),
        Some(Outcome::Redirect(
            parse_url("https://list.example.com:4443/other.txt").unwrap()
        ))
    );
    let mut r = Response::new(url(), 4);
    assert_eq!(
        r.feed(b"HTTP/1.1 301 Moved\r\nLocation: https://b.example.com/x\r\n\r\n")
            .unwrap(),
        Some(Outcome::Redirect(
            parse_url("https://b.example.com/x").unwrap()
        ))
    );
    for bad in [
        &b"HTTP/1.1 302 Found\r\nLocation: http://b.example.com/x\r\n\r\n"[..],
        b"HTTP/1.1 302 Found\r\n\r\n",
        b"SSH-2.0-x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
    ] {
        let mut r = Response::new(url(), 100);
        assert!(
            matches!(r.feed(bad), Err(HttpError::Malformed(_))),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}
