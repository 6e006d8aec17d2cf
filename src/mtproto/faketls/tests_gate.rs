//! White-box tests of `faketls::gate`, `clock` and `replay`: each rule of the verdict with
//! explicit time (no clock reads).

use super::clock::{ClockEvent, ClockTrust, CLOCK_FLOOR};
use super::gate::{EeKey, Gate, Reject};
use super::replay::ReplayCache;
use super::tests_hello::{build, sign, signed, sni_ext, DOMAIN, KEY, NOW};
use crate::rng::Rng;

fn keys() -> Vec<EeKey> {
    vec![
        EeKey {
            index: 2,
            key: [7; 16],
            domain: "other.org".into(),
        },
        EeKey {
            index: 5,
            key: KEY,
            domain: DOMAIN.into(),
        },
    ]
}

/// A gate whose clock is trusted: started at NOW − 100 s, then stepped to NOW.
fn trusted_gate(window_s: u64) -> Gate {
    let mut g = Gate::new(window_s, 64, NOW - 100, 0);
    g.observe_clock(NOW, 1000);
    assert_eq!(g.take_clock_event(), Some(ClockEvent::Jumped { by_s: 99 }));
    assert!(g.clock_trusted());
    g
}

#[test]
fn gate_accepts_a_hello_signed_by_client_rs() {
    let mut g = Gate::new(120, 64, NOW, 0);
    let rec = signed(&KEY, DOMAIN, NOW + 3, 1);
    let a = g.check(&rec, &keys(), NOW, 0).unwrap();
    assert_eq!((a.index, a.key, a.cipher), (5, KEY, 0x1301));
    assert_eq!(&a.random[..], &rec[11..43]);
    assert_eq!((a.session_id_len, &a.session_id[..]), (32, &rec[44..76]));
    assert_eq!(a.skew_s, 3);
}

#[test]
fn gate_rule_digest_refuses_a_wrong_key() {
    let mut g = Gate::new(120, 64, NOW, 0);
    let rec = signed(&[1; 16], DOMAIN, NOW, 1);
    assert_eq!(g.check(&rec, &keys(), NOW, 0), Err(Reject::WrongKey));
    assert_eq!(g.check(&rec, &[], NOW, 0), Err(Reject::WrongKey));
    assert_eq!(
        g.check(b"\x16\x03\x01\x00\x01\x01", &keys(), NOW, 0),
        Err(Reject::Malformed)
    );
}

#[test]
fn gate_rule_sni_must_equal_the_keys_domain_case_insensitive() {
    let mut g = Gate::new(120, 64, NOW, 0);
    let rec = signed(&KEY, "other.org", NOW, 1);
    assert_eq!(g.check(&rec, &keys(), NOW, 0), Err(Reject::WrongSni));
    let rec = signed(&KEY, "EXAMPLE.Com", NOW, 2);
    assert_eq!(g.check(&rec, &keys(), NOW, 0).unwrap().index, 5);
    // no SNI at all
    let mut bare = build(&[0x1301], &[(0x17, vec![])], &[]);
    sign(&mut bare, &KEY, NOW as u32);
    assert_eq!(g.check(&bare, &keys(), NOW, 0), Err(Reject::WrongSni));
    let mut with = build(&[0x1301], &[(0, sni_ext(DOMAIN.as_bytes()))], &[]);
    sign(&mut with, &KEY, NOW as u32);
    assert!(g.check(&with, &keys(), NOW, 0).is_ok());
}

#[test]
fn gate_rule_two_secrets_sharing_a_key_match_by_domain() {
    let mut ks = keys();
    ks.push(EeKey {
        index: 9,
        key: KEY,
        domain: "second.net".into(),
    });
    let mut g = Gate::new(120, 64, NOW, 0);
    let rec = signed(&KEY, "second.net", NOW, 1);
    assert_eq!(g.check(&rec, &ks, NOW, 0).unwrap().index, 9);
}

#[test]
fn gate_rule_stale_refused_with_a_trusted_clock_both_ways() {
    let mut g = trusted_gate(120);
    for (i, ts) in [NOW - 121, NOW + 121].into_iter().enumerate() {
        let rec = signed(&KEY, DOMAIN, ts, i as u8);
        assert_eq!(g.check(&rec, &keys(), NOW, 2000), Err(Reject::Stale));
    }
    for (i, ts) in [NOW - 120, NOW + 120].into_iter().enumerate() {
        let rec = signed(&KEY, DOMAIN, ts, 10 + i as u8);
        let a = g.check(&rec, &keys(), NOW, 2000).unwrap();
        assert!(a.clock_trusted);
    }
    let c = g.counters();
    assert_eq!((c.stale, c.accepted_unchecked), (2, 0));
}

#[test]
fn gate_rule_window_0_never_checks_timestamps() {
    let mut g = trusted_gate(0);
    let rec = signed(&KEY, DOMAIN, 5, 1);
    assert!(g.check(&rec, &keys(), NOW, 2000).is_ok());
}

#[test]
fn gate_rule_untrusted_clock_accepts_and_reports_looks_unset_once() {
    // a router at its firmware date
    let boot = 1_600_000_000;
    let mut g = Gate::new(120, 64, boot, 0);
    for i in 0..3u8 {
        let rec = signed(&KEY, DOMAIN, NOW + u64::from(i), i);
        let a = g.check(&rec, &keys(), boot + 1, 1000).unwrap();
        assert!(!a.clock_trusted);
    }
    assert_eq!(
        g.take_clock_event(),
        Some(ClockEvent::LooksUnset { wall_s: boot })
    );
    assert_eq!(g.take_clock_event(), None);
    assert_eq!(g.counters().accepted_unchecked, 3);
    assert!(!g.clock_trusted());
}

#[test]
fn gate_rule_untrusted_after_floor_disagreeing_client_is_accepted_and_looks_unset() {
    let mut g = Gate::new(120, 64, NOW, 0);
    let rec = signed(&KEY, DOMAIN, NOW - 5000, 1);
    assert!(g.check(&rec, &keys(), NOW, 0).is_ok());
    assert_eq!(
        g.take_clock_event(),
        Some(ClockEvent::LooksUnset { wall_s: NOW })
    );
    assert!(!g.clock_trusted());
}

#[test]
fn gate_rule_trust_after_a_confirming_hello_then_stale_is_refused() {
    let mut g = Gate::new(120, 64, NOW, 0);
    let rec = signed(&KEY, DOMAIN, NOW - 30, 1);
    let a = g.check(&rec, &keys(), NOW, 0).unwrap();
    assert!(!a.clock_trusted);
    assert_eq!(g.take_clock_event(), Some(ClockEvent::Confirmed));
    assert!(g.clock_trusted());
    assert_eq!(g.counters().accepted_unchecked, 0);
    let old = signed(&KEY, DOMAIN, NOW - 500, 2);
    assert_eq!(g.check(&old, &keys(), NOW + 1, 1000), Err(Reject::Stale));
}

#[test]
fn gate_rule_trust_after_a_jump_past_the_floor() {
    let boot = 1_600_000_000;
    let mut g = Gate::new(120, 64, boot, 0);
    assert_eq!(g.take_clock_event(), None); // queued until the next reading
    g.observe_clock(boot + 5, 5000);
    assert_eq!(
        g.take_clock_event(),
        Some(ClockEvent::LooksUnset { wall_s: boot })
    );
    assert!(!g.clock_trusted());
    let rec = signed(&KEY, DOMAIN, NOW - 500, 1);
    let by = (NOW - (boot + 6)) as i64;
    assert_eq!(g.check(&rec, &keys(), NOW, 6000), Err(Reject::Stale));
    assert_eq!(g.take_clock_event(), Some(ClockEvent::Jumped { by_s: by }));
    assert!(g.clock_trusted());
}

#[test]
fn gate_rule_replay_refused_and_only_accepted_hellos_inserted() {
    let mut g = Gate::new(120, 64, NOW, 0);
    let rec = signed(&KEY, DOMAIN, NOW, 1);
    // refused hellos are not remembered: the same random with a wrong SNI first
    let mut wrong = rec.clone();
    wrong[121] = b'x';
    assert!(g.check(&wrong, &keys(), NOW, 0).is_err());
    assert!(g.check(&rec, &keys(), NOW, 0).is_ok());
    assert_eq!(g.check(&rec, &keys(), NOW, 10), Err(Reject::Replay));
    assert_eq!(g.counters().replays, 1);
    assert_eq!(g.replay_cache().len(), 1);
    // a copy with other timestamp bytes still passes the digest: still a replay
    let mut moved = rec.clone();
    moved[39] ^= 0x01; // the timestamp moves by one second
    assert_eq!(g.check(&moved, &keys(), NOW, 20), Err(Reject::Replay));
}

/// `rec` with its timestamp moved from `from` to `to` seconds: only the XOR-ed bytes 39..43
/// change, which anyone can do without the key (the digest covers bytes 11..39 only).
fn shift_timestamp(rec: &[u8], from: u64, to: u64) -> Vec<u8> {
    let mut out = rec.to_vec();
    let delta = (from as u32 ^ to as u32).to_le_bytes();
    for (b, d) in out[39..43].iter_mut().zip(delta) {
        *b ^= d;
    }
    out
}

#[test]
fn replay_rule_entries_do_not_expire_since_a_prober_can_move_the_timestamp() {
    let mut g = trusted_gate(10);
    let rec = signed(&KEY, DOMAIN, NOW, 1);
    assert!(g.check(&rec, &keys(), NOW, 1000).is_ok());
    assert_eq!(g.check(&rec, &keys(), NOW, 20_999), Err(Reject::Replay));
    // Long after 2 × window: the copy as recorded is stale, and the copy with its timestamp
    // moved to now (no key needed) is still a replay.
    let later = NOW + 3600;
    assert_eq!(g.check(&rec, &keys(), later, 3_601_000), Err(Reject::Stale));
    let moved = shift_timestamp(&rec, NOW, later);
    assert_eq!(
        g.check(&moved, &keys(), later, 3_601_000),
        Err(Reject::Replay)
    );
    // untrusted clock: the same
    let mut u = Gate::new(10, 64, NOW, 0);
    let rec = signed(&KEY, DOMAIN, NOW - 5000, 2);
    assert!(u.check(&rec, &keys(), NOW, 0).is_ok());
    assert_eq!(
        u.check(&rec, &keys(), NOW + 1000, 1_000_000),
        Err(Reject::Replay)
    );
}

fn random(k: u32) -> [u8; 32] {
    let mut r = [0u8; 32];
    r[..4].copy_from_slice(&k.to_le_bytes());
    r[20] = 1;
    r
}

#[test]
fn replay_cache_full_evicts_the_oldest_and_counts_it() {
    let mut c = ReplayCache::new(2, 0);
    assert!(!c.check_and_insert(&random(1), 0));
    assert!(!c.check_and_insert(&random(2), 1));
    assert!(!c.check_and_insert(&random(3), 2));
    assert_eq!((c.len(), c.capacity(), c.evicted_early()), (2, 2, 1));
    assert!(c.check_and_insert(&random(3), 3));
    assert!(c.check_and_insert(&random(2), 3));
    assert!(!c.check_and_insert(&random(1), 4)); // was evicted: new again, evicts 2
    assert!(!c.check_and_insert(&random(2), 5));
    assert_eq!(c.evicted_early(), 3);
}

#[test]
fn replay_cache_expiry_after_ttl() {
    let mut c = ReplayCache::new(4, 1000);
    assert!(!c.check_and_insert(&random(1), 100));
    assert!(c.check_and_insert(&random(1), 1099));
    assert!(!c.check_and_insert(&random(1), 1100));
    assert_eq!((c.len(), c.evicted_early()), (1, 0));
    c.set_expiring(false);
    assert!(c.check_and_insert(&random(1), 1_000_000));
}

#[test]
fn replay_cache_capacity_0_is_off() {
    let mut c = ReplayCache::new(0, 0);
    assert!(!c.check_and_insert(&random(1), 0));
    assert!(!c.check_and_insert(&random(1), 0));
    assert_eq!(c.capacity(), 0);
}

#[test]
fn replay_cache_agrees_with_a_naive_model_under_colliding_keys() {
    // keys share few hash prefixes, so probe runs are long and deletions shift them
    let mut r = Rng::from_seed([3; 48]);
    let cap = 16;
    let ttl = 50;
    let mut c = ReplayCache::new(cap, ttl);
    let mut model: std::collections::VecDeque<(u32, u64)> = Default::default();
    let mut now = 0u64;
    for _ in 0..20_000 {
        now += u64::from(r.below(4));
        let k = r.below(40);
        let mut key = random(k);
        key[..4].copy_from_slice(&(k % 3).to_le_bytes());
        key[4] = k as u8;
        while model.front().is_some_and(|&(_, t)| now - t >= ttl) {
            model.pop_front();
        }
        let want = model.iter().any(|&(m, _)| m == k);
        if !want {
            if model.len() == cap {
                model.pop_front();
            }
            model.push_back((k, now));
        }
        assert_eq!(c.check_and_insert(&key, now), want);
        assert_eq!(c.len(), model.len());
    }
}

#[test]
fn clock_rule_floor_step_and_small_drift() {
    let mut c = ClockTrust::new(CLOCK_FLOOR + 10, 0);
    assert!(!c.trusted());
    assert_eq!(c.observe(CLOCK_FLOOR + 19, 5_000), None); // 4 s drift
    assert_eq!(
        c.observe(CLOCK_FLOOR + 40, 10_000),
        Some(ClockEvent::Jumped { by_s: 16 })
    );
    assert!(c.trusted());
    // stepped back before the floor: untrusted, reported as unset
    assert_eq!(
        c.observe(100, 11_000),
        Some(ClockEvent::Jumped {
            by_s: 89 - (CLOCK_FLOOR as i64 + 30)
        })
    );
    assert!(!c.trusted());
    assert_eq!(
        c.observe(101, 12_000),
        Some(ClockEvent::LooksUnset { wall_s: 100 })
    );
    assert_eq!(c.observe(102, 13_000), None);
    assert_eq!(
        ClockEvent::Jumped { by_s: 16 }.to_string(),
        "wall clock jumped by +16 s"
    );
    assert!(ClockEvent::LooksUnset { wall_s: 100 }
        .to_string()
        .contains("reads 100"));
}

#[test]
fn ee_keys_from_secrets_keep_config_indexes_and_skip_other_forms() {
    use crate::mtproto::obfs2::Secret;
    let k = "0123456789abcdef0123456789abcdef";
    let secrets: Vec<Secret> = [
        k.to_string(),
        format!("ee{k}612e696f"),
        format!("dd{k}"),
        format!("ee{k}622e696f"),
    ]
    .iter()
    .map(|s| Secret::parse(s).unwrap())
    .collect();
    let ee = EeKey::from_secrets(&secrets);
    assert_eq!(ee.len(), 2);
    assert_eq!((ee[0].index, ee[0].domain.as_str()), (1, "a.io"));
    assert_eq!((ee[1].index, ee[1].domain.as_str()), (3, "b.io"));
    assert_eq!(ee[0].key, secrets[1].key);
}
