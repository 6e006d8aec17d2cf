use super::*;
use crate::rng::Rng;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn dc(n: u16) -> DcId {
    DcId::plain(n)
}

const CLIENT_A: &str = "192.168.1.10";
const CLIENT_B: &str = "192.168.1.11";

#[test]
fn builtin_exact_addresses() {
    let t = DcTable::new();
    assert_eq!(t.lookup(ip("149.154.175.50")), Some(dc(1)));
    assert_eq!(t.lookup(ip("149.154.167.51")), Some(dc(2)));
    assert_eq!(t.lookup(ip("95.161.76.100")), Some(dc(2)));
    assert_eq!(t.lookup(ip("149.154.175.100")), Some(dc(3)));
    assert_eq!(t.lookup(ip("149.154.167.91")), Some(dc(4)));
    assert_eq!(t.lookup(ip("149.154.171.5")), Some(dc(5)));
    let test = |n| DcId {
        test: true,
        ..dc(n)
    };
    assert_eq!(t.lookup(ip("149.154.175.10")), Some(test(1)));
    assert_eq!(t.lookup(ip("149.154.175.40")), Some(test(1)));
    assert_eq!(t.lookup(ip("149.154.167.40")), Some(test(2)));
    assert_eq!(t.lookup(ip("149.154.175.117")), Some(test(3)));
    assert_eq!(builtin().count(), BUILTIN.len());
}

#[test]
fn ipv6_lookup_and_v4_mapped_addresses() {
    let t = DcTable::new();
    assert_eq!(t.lookup(ip("2001:b28:f23d:f001::a")), Some(dc(1)));
    assert_eq!(t.lookup(ip("2001:67c:4e8:f002::a")), Some(dc(2)));
    assert_eq!(t.lookup(ip("2001:b28:f23d:f003::a")), Some(dc(3)));
    assert_eq!(t.lookup(ip("2001:67c:4e8:f004::a")), Some(dc(4)));
    assert_eq!(t.lookup(ip("2001:b28:f23f:f005::a")), Some(dc(5)));
    assert_eq!(
        t.lookup(ip("2001:67c:4e8:f002::e")),
        Some(DcId {
            test: true,
            ..dc(2)
        })
    );
    // Exact only: a neighbour in the same /64 is unknown.
    assert_eq!(t.lookup(ip("2001:67c:4e8:f002::b")), None);
    assert_eq!(t.lookup(ip("::ffff:149.154.167.91")), Some(dc(4)));
    assert_eq!(normalise(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
    assert_eq!(normalise(ip("::1")), ip("::1"));
    // An IPv4-compatible (not mapped) address is not normalised.
    assert_eq!(t.lookup(ip("::149.154.167.91")), None);
}

#[test]
fn dc2_and_dc4_neighbours_are_unknown() {
    // DC 2 and DC 4 share 149.154.167.0/24: no address there is guessed.
    let mut t = DcTable::new();
    for last in [50u8, 52, 90, 92, 1, 220, 255] {
        let a = IpAddr::V4(Ipv4Addr::new(149, 154, 167, last));
        assert_eq!(t.lookup(a), None, "{a}");
        assert_eq!(t.choose(a, ip(CLIENT_A), None, 0), None, "{a}");
    }
}

#[test]
fn android_random_dc_bytes_never_override_the_table() {
    // 10^5 inits with random bytes 60-61 (Android without a secret) toward table addresses.
    let mut rng = Rng::from_seed([9; 48]);
    let mut t = DcTable::new();
    let entries: Vec<(IpAddr, DcId)> = builtin().collect();
    let mut media = 0;
    for i in 0..100_000u64 {
        let mut b = [0u8; 3];
        rng.fill(&mut b);
        let (dst, want) = entries[usize::from(b[2]) % entries.len()];
        let packet = i16::from_le_bytes([b[0], b[1]]);
        let (got, source) = t
            .choose(dst, ip(CLIENT_A), Some(packet), i)
            .expect("a table address always has an answer");
        assert_eq!(source, DcSource::Table);
        assert_eq!((got.dc, got.test), (want.dc, want.test), "packet {packet}");
        media += usize::from(got.media);
    }
    // Media only where the packet named the same DC (about 1 in 32768 draws): rare.
    assert!(media < 20, "{media}");
    assert_eq!(t.tracked(), 0, "a table hit is no observation");
}

#[test]
fn the_packet_sets_media_only_for_the_tables_dc() {
    let mut t = DcTable::new();
    let d2 = ip("149.154.167.51");
    let c = ip(CLIENT_A);
    let m2 = DcId {
        media: true,
        ..dc(2)
    };
    assert_eq!(t.choose(d2, c, Some(-2), 0), Some((m2, DcSource::Table)));
    assert_eq!(t.choose(d2, c, Some(2), 0), Some((dc(2), DcSource::Table)));
    assert_eq!(t.choose(d2, c, Some(-4), 0), Some((dc(2), DcSource::Table)));
    // Test DC 2 (-10002) is not DC 2.
    assert_eq!(
        t.choose(d2, c, Some(-10002), 0),
        Some((dc(2), DcSource::Table))
    );
    assert_eq!(t.choose(d2, c, None, 0), Some((dc(2), DcSource::Table)));
}

#[test]
fn flags_win_and_are_replaced_on_reload() {
    let lo = ip("127.0.0.5");
    let flags = std::collections::BTreeMap::from([
        (lo, dc(4)),
        (ip("149.154.167.51"), dc(3)),
        (ip("::ffff:127.0.0.6"), dc(1)),
    ]);
    let mut t = DcTable::with_flags(&flags);
    assert_eq!(t.lookup(lo), Some(dc(4)));
    assert_eq!(t.lookup(ip("127.0.0.6")), Some(dc(1)));
    assert_eq!(
        t.choose(ip("149.154.167.51"), ip(CLIENT_A), Some(2), 0),
        Some((dc(3), DcSource::Flag))
    );
    t.set_flags(&std::collections::BTreeMap::new());
    assert_eq!(t.lookup(lo), None);
    assert_eq!(t.lookup(ip("149.154.167.51")), Some(dc(2)));
}

#[test]
fn packet_dc_on_a_miss_only_when_valid() {
    let mut t = DcTable::new();
    let dst = ip("10.1.2.3");
    let c = ip(CLIENT_A);
    for bad in [0i16, 6, 203, 9999, 10000, 10006, -7, i16::MIN] {
        assert_eq!(t.choose(dst, c, Some(bad), 0), None, "{bad}");
    }
    assert_eq!(
        t.choose(dst, c, None, 0),
        None,
        "a plain transport has no DC"
    );
    assert_eq!(t.tracked(), 0, "an invalid DC is no observation");
    let m3 = DcId {
        media: true,
        ..dc(3)
    };
    assert_eq!(t.choose(dst, c, Some(-3), 1), Some((m3, DcSource::Packet)));
    let t3 = DcId {
        test: true,
        ..dc(3)
    };
    let other = ip("10.1.2.4");
    assert_eq!(
        t.choose(other, c, Some(10003), 1),
        Some((t3, DcSource::Packet))
    );
}

#[test]
fn learned_after_three_agreeing_observations_from_two_clients() {
    let mut t = DcTable::new();
    let dst = ip("10.9.9.9");
    let (a, b) = (ip(CLIENT_A), ip(CLIENT_B));
    assert_eq!(
        t.choose(dst, a, Some(4), 1),
        Some((dc(4), DcSource::Packet))
    );
    // Media and non-media of one DC agree.
    assert_eq!(
        t.choose(dst, a, Some(-4), 2).map(|(_, s)| s),
        Some(DcSource::Packet)
    );
    assert_eq!(t.lookup(dst), None, "not yet: one client so far");
    assert_eq!(
        t.choose(dst, b, Some(4), 3),
        Some((dc(4), DcSource::Packet))
    );
    assert_eq!(t.lookup(dst), Some(dc(4)));
    assert_eq!(t.learned().collect::<Vec<_>>(), vec![(dst, dc(4))]);
    // Once learned, the table answers and the packet no longer matters.
    assert_eq!(
        t.choose(dst, a, Some(1), 4),
        Some((dc(4), DcSource::Learned))
    );
    assert_eq!(t.lookup(dst), Some(dc(4)));
}

#[test]
fn one_client_address_cannot_teach() {
    let mut t = DcTable::new();
    let dst = ip("10.9.9.8");
    // Also through its v4-mapped form: the same client.
    for (i, c) in ["192.168.1.10", "::ffff:192.168.1.10"]
        .iter()
        .cycle()
        .take(50)
        .enumerate()
    {
        assert_eq!(
            t.choose(dst, ip(c), Some(2), i as u64),
            Some((dc(2), DcSource::Packet))
        );
    }
    assert_eq!(t.lookup(dst), None);
}

#[test]
fn disagreement_resets_and_contests() {
    let mut t = DcTable::new();
    let dst = ip("10.9.9.7");
    let (a, b) = (ip(CLIENT_A), ip(CLIENT_B));
    assert!(t.choose(dst, a, Some(2), 1).is_some());
    assert!(t.choose(dst, b, Some(2), 2).is_some());
    // A disagreeing DC: refused, and the address is contested from now on.
    assert_eq!(t.choose(dst, a, Some(4), 3), None);
    assert_eq!(t.contested().collect::<Vec<_>>(), vec![dst]);
    for i in 0..10 {
        assert_eq!(t.choose(dst, b, Some(2), 4 + i), None);
    }
    assert_eq!(t.lookup(dst), None);
    // A flag still answers for it.
    let flags = std::collections::BTreeMap::from([(dst, dc(2))]);
    t.set_flags(&flags);
    assert_eq!(t.choose(dst, a, Some(4), 20), Some((dc(2), DcSource::Flag)));
}

#[test]
fn the_learner_is_bounded_and_evicts_the_least_recent() {
    let mut t = DcTable::new();
    let c = ip(CLIENT_A);
    let first = ip("10.0.0.0");
    for i in 0..(LEARNER_CAP as u32 + 100) {
        let dst = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
        assert!(t.choose(dst, c, Some(1), u64::from(i)).is_some());
        assert!(t.tracked() <= LEARNER_CAP);
    }
    assert_eq!(t.tracked(), LEARNER_CAP);
    // The oldest went first: a contest recorded on it is gone with it.
    assert!(!t.learner.entries.contains_key(&first));
    let newest = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + LEARNER_CAP as u32 + 99));
    assert!(t.learner.entries.contains_key(&newest));
}

#[test]
fn source_names() {
    assert_eq!(DcSource::Table.name(), "table");
    assert_eq!(DcSource::Flag.name(), "flag");
    assert_eq!(DcSource::Learned.name(), "learned");
    assert_eq!(DcSource::Packet.name(), "packet");
}

#[test]
fn unknown_destinations_are_counted_and_bounded() {
    let mut u = UnknownDsts::default();
    let a: IpAddr = "10.9.0.1".parse().unwrap();
    u.record(a, 1);
    u.record("::ffff:10.9.0.1".parse().unwrap(), 2);
    assert_eq!(
        u.list(),
        vec![(a, 2, 2)],
        "a mapped address counts as its IPv4 form"
    );
    for i in 0..(UNKNOWN_CAP as u32 + 10) {
        u.record(
            IpAddr::from(std::net::Ipv4Addr::from(0x0a0a_0000 + i)),
            10 + u64::from(i),
        );
    }
    let l = u.list();
    assert_eq!(
        l.len(),
        UNKNOWN_CAP,
        "client input cannot grow it past the cap"
    );
    assert!(
        !l.iter().any(|e| e.0 == a),
        "the least recently seen went first"
    );
}
