//! Unit tests of `reload` and `listen` through a real reactor (no loop run, no signals sent):
//! the listener swap binds the new address before the old one is closed, a bind failure
//! rejects the reload with the old listener and configuration kept, restart-only settings
//! keep their value, and new secrets replace the keys new sessions are checked against.
//! Sockets on 127.0.0.0/8 only.

use std::net::{SocketAddr, TcpListener as StdListener, TcpStream};
use std::time::Duration;

use super::*;
use crate::mtproto::obfs2::Secret;

const OLD: &str = "0123456789abcdef0123456789abcdef";
const NEW: &str = "fedcba9876543210fedcba9876543210";

/// A config on 127.0.0.1:0 with no names to resolve and a resolver that reads empty files.
fn cfg() -> Config {
    let dir = std::env::temp_dir().join(format!("tgwp-reactor-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (hosts, resolv) = (dir.join("hosts"), dir.join("resolv.conf"));
    std::fs::write(&hosts, "").unwrap();
    std::fs::write(&resolv, "nameserver 127.0.0.1\n").unwrap();
    let mut c = Config::with_secrets(vec![Secret::parse(OLD).unwrap()]);
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.startup_probes = false;
    c.hosts_file = hosts;
    c.resolv_conf = resolv;
    c.max_connections = 8;
    // No shared CF domain list fetch (on by default, toward GitHub).
    c.cf_domain_list = None;
    c
}

/// A reactor whose reloads return `next`.
fn reactor_reloading_to(next: Config) -> Reactor {
    let mut r = Reactor::new(cfg()).expect("reactor");
    r.reloader = Some(Box::new(move || Ok((next.clone(), Vec::new()))));
    r
}

fn listening(r: &Reactor) -> SocketAddr {
    r.listener
        .as_ref()
        .expect("a listener")
        .local_addr()
        .unwrap()
}

fn connects(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
}

#[test]
fn a_listen_change_binds_the_new_address_and_then_closes_the_old_one() {
    let mut next = cfg();
    next.listen = "127.0.0.2:0".parse().unwrap();
    let mut r = reactor_reloading_to(next);
    let old = listening(&r);
    let line = r.reload().expect("applied");
    assert!(line.contains("listen"), "{line}");
    let new = listening(&r);
    assert_eq!(new.ip().to_string(), "127.0.0.2");
    assert_eq!(r.s.listen, new);
    assert!(connects(new), "new listener accepts");
    assert!(!connects(old), "old listener closed");
    assert_eq!((r.s.stats.reloads, r.s.stats.reloads_rejected), (1, 0));
}

#[test]
fn a_new_address_that_cannot_be_bound_rejects_the_reload_and_keeps_everything() {
    let taken = StdListener::bind("127.0.0.3:0").expect("occupy an address");
    let mut next = cfg();
    next.listen = taken.local_addr().unwrap();
    next.secrets = vec![Secret::parse(NEW).unwrap()];
    let mut r = reactor_reloading_to(next);
    let old = listening(&r);
    let why = r.reload().expect_err("rejected");
    assert!(
        why.starts_with(&format!(
            "cannot listen on {}: ",
            taken.local_addr().unwrap()
        )),
        "{why}"
    );
    assert_eq!(listening(&r), old);
    assert!(connects(old), "old listener still accepts");
    assert_eq!(r.s.cfg.listen, cfg().listen, "configuration kept");
    assert_eq!(
        r.s.keys,
        vec![Secret::parse(OLD).unwrap().key],
        "old secret kept"
    );
    assert_eq!((r.s.stats.reloads, r.s.stats.reloads_rejected), (0, 1));
}

#[test]
fn new_secrets_replace_the_keys_and_restart_only_settings_keep_their_value() {
    let mut next = cfg();
    next.secrets = vec![Secret::parse(NEW).unwrap()];
    next.buf_size *= 2;
    next.idle_timeout = Duration::from_secs(7);
    let mut r = reactor_reloading_to(next);
    let buf = r.s.cfg.buf_size;
    let line = r.reload().expect("applied");
    assert_eq!(
        line,
        "reload: applied (secrets, idle-timeout); needs a restart: buf-kb"
    );
    assert_eq!(r.s.keys, vec![Secret::parse(NEW).unwrap().key]);
    assert_eq!(r.s.cfg.buf_size, buf);
    assert_eq!(r.s.cfg.idle_timeout, Duration::from_secs(7));
}

#[test]
fn a_reload_without_a_source_or_while_draining_is_rejected() {
    let mut r = Reactor::new(cfg()).expect("reactor");
    assert!(r.reload().is_err(), "no reloader");
    r.reloader = Some(Box::new(|| {
        Err("--secret-file: line 1: invalid secret".into())
    }));
    assert_eq!(
        r.reload().unwrap_err(),
        "--secret-file: line 1: invalid secret"
    );
    r.reloader = Some(Box::new(|| Ok((cfg(), Vec::new()))));
    r.life = Life::Draining { until: u64::MAX };
    assert_eq!(r.reload().unwrap_err(), "shutting down");
    assert_eq!(r.s.stats.reloads_rejected, 3);
}

#[test]
fn a_waiting_listener_is_bound_when_its_retry_is_due() {
    // The EADDRNOTAVAIL itself cannot be produced on loopback (all of 127/8 is assigned on
    // Linux): the state after it is set up directly, as `Reactor::new` leaves it.
    let mut c = cfg();
    c.bind_retry = Duration::from_millis(500);
    let mut r = Reactor::new(c).expect("reactor");
    r.close_listener();
    r.bind_retry = BindRetry::new(500);
    r.bind_retry.schedule(r.now);
    assert!(r.listener.is_none());
    assert_eq!(
        r.life_deadline(),
        Some(r.now + 500),
        "the loop wakes for the retry"
    );
    r.now += 499;
    assert_eq!(r.life_check(), Next::Go);
    assert!(r.listener.is_none(), "not due yet");
    r.now += 1;
    assert_eq!(r.life_check(), Next::Go);
    let addr = listening(&r);
    assert!(connects(addr));
    assert!(!r.bind_retry.waiting());
    assert_eq!(r.life_deadline(), None);
}
