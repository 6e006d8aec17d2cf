//! The cheap modes (`side`): a direct client's own init upstream with its DC patched and its
//! bytes passed through unchanged both ways (pass-through), a plain transport without a client
//! cipher, and the fall-back from pass-through to re-encryption.

use std::io::Write;

use super::*;
use crate::mtproto::framing::encode;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Proxy,
    Direct,
    Plain,
}

/// A direct client's init naming DC `dc` (Android's may name anything: 4 here, the relay is
/// toward DC 2).
fn direct_init(dc: i16, rng: &mut Rng) -> (ClientSide, Cipher, Cipher) {
    let i = initiate(Tag::Intermediate, dc, None, rng);
    let accepted = accept_raw(&i.init).expect("direct init opens");
    let side = ClientSide::Direct {
        init: i.init,
        accepted,
    };
    (side, i.encrypt, i.decrypt)
}

impl Rig {
    /// A rig whose relay is built for `side` (the app speaks intermediate) toward DC 2.
    fn with_side(kind: LinkKind, caps: (usize, usize), buf: usize, side: Side) -> Rig {
        let mut rig = Rig::new(kind, caps.0, caps.1, buf);
        if side == Side::Proxy {
            return rig;
        }
        let bufs = (RelayBuf::new(buf), RelayBuf::new(buf));
        let cs = match side {
            Side::Direct => {
                let (cs, enc, dec) = direct_init(4, &mut rig.rng);
                rig.app_enc = enc;
                rig.app_dec = dec;
                cs
            }
            _ => {
                rig.app_plain = true;
                ClientSide::Plain(Tag::Intermediate)
            }
        };
        rig.relay = Relay::with_client(cs, 2, kind, bufs.0, bufs.1, false, &mut rig.rng);
        rig.relay.trust_replies();
        rig
    }
}

#[test]
fn pass_through_is_byte_exact_both_ways_on_every_link() {
    for kind in [LinkKind::Raw, LinkKind::WsPackets, LinkKind::WsStream] {
        let mut rig = Rig::with_side(kind, (700, 900), 2048, Side::Direct);
        assert_eq!(rig.relay.mode(), RelayMode::PassThrough);
        assert_eq!(rig.run(), None);
        let packets: Vec<Vec<u8>> = (0..30).map(|i| packet(4 + i * 131, i as u8)).collect();
        for p in &packets {
            rig.app_send(p);
        }
        let down = bulk(90_000, 5);
        for chunk in down.chunks(3000) {
            rig.front_data(chunk);
        }
        assert_eq!(rig.run(), None, "{kind:?}");
        // The front opened the patched init (`take_init`: intermediate, DC 2) and decrypts the
        // client's bytes with it: the very bytes the app put on the wire.
        assert_eq!(
            rig.front_wire_in, rig.app_wire_out,
            "{kind:?}: up unchanged"
        );
        assert_eq!(
            rig.app_wire_in, rig.front_wire_out,
            "{kind:?}: down unchanged"
        );
        assert_eq!(rig.front_plain, packets.concat(), "{kind:?}");
        assert_eq!(rig.app_in, down, "{kind:?}");
        assert_eq!(rig.meter.bytes_down, down.len() as u64);
    }
}

#[test]
fn pass_through_splits_messages_like_reencryption() {
    // One packet per message on the WS front: the same frames as the re-encrypting relay,
    // under backpressure, for packets of every header shape and split reads.
    let packets: Vec<Vec<u8>> = (0..60)
        .map(|i| packet(4 + (i * 211) % 3000, i as u8))
        .collect();
    let mut frames = Vec::new();
    for side in [Side::Proxy, Side::Direct] {
        for plain_scratch in [false, true] {
            let mut rig = Rig::with_side(LinkKind::WsPackets, (97, 300), 1024, side);
            if plain_scratch {
                rig = rig.plain();
            }
            rig.run();
            for p in &packets {
                rig.app_send(p);
            }
            assert_eq!(rig.run(), None);
            assert_eq!(rig.front_messages(), packets, "{side:?}");
            frames.push(rig.frames.iter().map(|f| f.len).collect::<Vec<_>>());
        }
    }
    assert!(frames.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn bytes_read_while_connecting_go_through_unchanged() {
    let mut rng = Rng::from_seed([8; 48]);
    let (mut side, mut app_enc, _) = direct_init(-4, &mut rng);
    let early = packet(40, 1);
    let mut wire = early.clone();
    app_enc.apply(&mut wire);
    // Connecting decrypts what it reads (`ClientSide::client_read`); the relay gets plaintext.
    let mut up = RelayBuf::new(4096);
    let mut got = wire.clone();
    side.client_read(&mut got);
    assert_eq!(got, early);
    up.space()[..got.len()].copy_from_slice(&got);
    up.fill(got.len());
    let relay = Relay::with_client(
        side,
        2,
        LinkKind::Raw,
        up,
        RelayBuf::new(4096),
        false,
        &mut rng,
    );
    assert_eq!(relay.mode(), RelayMode::PassThrough);
    assert_eq!(
        relay.up.unprocessed(),
        &wire[..],
        "back to the client's ciphertext"
    );
}

#[test]
fn the_reply_check_still_runs_on_a_pass_through() {
    // Real framing both ways: the check follows headers without decrypting bodies.
    for kind in [LinkKind::Raw, LinkKind::WsPackets] {
        let mut rng = Rng::from_seed([9; 48]);
        let mut rig = Rig::with_side(kind, (4096, 4096), 4096, Side::Direct);
        let (side, enc, dec) = direct_init(2, &mut rng);
        rig.app_enc = enc;
        rig.app_dec = dec;
        let bufs = (RelayBuf::new(4096), RelayBuf::new(4096));
        rig.relay = Relay::with_client(side, 2, kind, bufs.0, bufs.1, false, &mut rig.rng);
        let mut req = vec![0u8; 8]; // auth_key_id 0: an unencrypted request
        req.extend(bulk(32, 1));
        rig.app_send(&encode(Tag::Intermediate, &req, &mut rng));
        assert_eq!(rig.run(), None);
        for i in 0..5 {
            let mut reply = vec![0u8; 8];
            reply.extend(bulk(1000 + i * 400, i as u8));
            rig.front_data(&encode(Tag::Intermediate, &reply, &mut rng));
        }
        assert_eq!(rig.run(), None);
        assert_eq!(rig.relay.replies(), 5, "{kind:?}");
        assert!(!rig.relay.mid_reply());
        // Half a packet: the client waits for the rest of a reply.
        let mut half = encode(Tag::Intermediate, &[0u8; 64], &mut rng);
        half.truncate(30);
        rig.front_data(&half);
        assert_eq!(rig.run(), None);
        assert!(rig.relay.mid_reply(), "{kind:?}");
    }
}

#[test]
fn a_first_reply_that_answers_nothing_ends_a_pass_through() {
    let mut rng = Rng::from_seed([10; 48]);
    let mut rig = Rig::with_side(LinkKind::Raw, (4096, 4096), 4096, Side::Direct);
    let (side, enc, dec) = direct_init(2, &mut rng);
    rig.app_enc = enc;
    rig.app_dec = dec;
    let bufs = (RelayBuf::new(4096), RelayBuf::new(4096));
    rig.relay = Relay::with_client(side, 2, LinkKind::Raw, bufs.0, bufs.1, false, &mut rig.rng);
    let mut req = vec![0u8; 8];
    req.extend(bulk(32, 1));
    rig.app_send(&encode(Tag::Intermediate, &req, &mut rng));
    rig.run();
    let reply = bulk(200, 7); // a random auth_key_id
    rig.front_data(&encode(Tag::Intermediate, &reply, &mut rng));
    assert_eq!(rig.run(), Some(CloseReason::BadReply));
    assert_eq!(rig.relay.bad_reply(), Some(reply::BadReply::FirstReply));
}

#[test]
fn plain_clients_have_no_client_cipher() {
    for kind in [LinkKind::Raw, LinkKind::WsPackets] {
        let mut rig = Rig::with_side(kind, (500, 700), 2048, Side::Plain);
        assert_eq!(rig.relay.mode(), RelayMode::Plain);
        rig.run();
        let packets: Vec<Vec<u8>> = (0..20).map(|i| packet(8 + i * 64, i as u8)).collect();
        for p in &packets {
            rig.app_send(p);
        }
        let down = bulk(40_000, 2);
        rig.front_data(&down);
        assert_eq!(rig.run(), None);
        assert_eq!(rig.app_wire_out, packets.concat(), "the app sent plaintext");
        assert_eq!(rig.front_plain, packets.concat(), "{kind:?}");
        assert_eq!(rig.app_wire_in, down, "{kind:?}: plaintext down");
    }
}

#[test]
fn a_plain_client_on_a_pooled_start_is_replayable() {
    // Regression: a plain relay kept no replay, so a plain client on a dead pooled upstream
    // waited with no first-byte deadline (no wait tracked) instead of being replayed.
    let mut rng = Rng::from_seed([14; 48]);
    let req = packet(40, 3);
    let mut up = RelayBuf::new(4096);
    up.space()[..req.len()].copy_from_slice(&req);
    up.fill(req.len());
    let side = ClientSide::Plain(Tag::Intermediate);
    let mut relay = Relay::with_client(
        side,
        2,
        LinkKind::Raw,
        up,
        RelayBuf::new(4096),
        false,
        &mut rng,
    );
    relay.keep_replay(Some(RelayBuf::new(4096)));
    assert!(relay.replayable(), "a plain relay keeps its replay");
    let resume = relay
        .rewind(&mut Scratch::new(1, None))
        .expect("replayable");
    assert!(matches!(resume.side, ClientSide::Plain(Tag::Intermediate)));
    assert_eq!(resume.up.unprocessed(), &req[..]);
}

#[test]
fn an_mtproto_proxy_tier_falls_back_to_reencryption() {
    let proxy_key = [0x5au8; 16];
    let mut rng = Rng::from_seed([11; 48]);
    let (mut side, mut app_enc, mut app_dec) = direct_init(-2, &mut rng);
    let mut early = b"\x0a\x00\x00\x00ten bytes!".to_vec();
    app_enc.apply(&mut early);
    side.client_read(&mut early);
    let mut up = RelayBuf::new(4096);
    up.space()[..early.len()].copy_from_slice(&early);
    up.fill(early.len());
    let mut relay = Relay::with_client(
        side,
        -2,
        LinkKind::Raw,
        up,
        RelayBuf::new(4096),
        false,
        &mut rng,
    );
    relay.trust_replies();
    relay.init_toward_proxy(&proxy_key, -2, &mut rng);
    assert_eq!(relay.mode(), RelayMode::Reencrypt);
    let (mut client, mut app_end) = pair(1 << 16, 1 << 16);
    let (mut upstream, mut proxy_end) = pair(1 << 16, 1 << 16);
    let mut c = b"\x04\x00\x00\x00more".to_vec();
    app_enc.apply(&mut c);
    app_end.write_all(&c).unwrap();
    let (mut scratch, mut meter) = (Scratch::new(1, None), Meter::default());
    rounds(
        &mut relay,
        (&mut client, &mut upstream),
        &mut meter,
        &mut scratch,
        &mut rng,
    );
    let mut got = vec![0u8; 64 + 14 + 8];
    proxy_end.read_exact(&mut got).unwrap();
    let init: [u8; 64] = got[..64].try_into().unwrap();
    let mut seen = accept(&init, &[proxy_key]).expect("a secret-keyed init");
    let mut plain = got[64..].to_vec();
    seen.decrypt.apply(&mut plain);
    assert_eq!(&plain, b"\x0a\x00\x00\x00ten bytes!\x04\x00\x00\x00more");
    let mut d = b"\x01\x00\x00\x00R".to_vec();
    seen.encrypt.apply(&mut d);
    proxy_end.write_all(&d).unwrap();
    rounds(
        &mut relay,
        (&mut client, &mut upstream),
        &mut meter,
        &mut scratch,
        &mut rng,
    );
    let mut back = [0u8; 5];
    app_end.read_exact(&mut back).unwrap();
    app_dec.apply(&mut back);
    assert_eq!(&back, b"\x01\x00\x00\x00R");
}

/// Ten steps with both sides ready: enough for these few bytes to cross both ways.
fn rounds(
    relay: &mut Relay,
    (client, upstream): (&mut PipeEnd, &mut PipeEnd),
    meter: &mut Meter,
    scratch: &mut Scratch,
    rng: &mut Rng,
) {
    let ready = Ready {
        read: true,
        write: true,
    };
    for _ in 0..10 {
        let (mut a, mut b) = (ready, ready);
        relay.step(client, &mut a, upstream, &mut b, meter, scratch, 0, rng);
    }
}

#[test]
fn a_replayable_start_needs_the_fall_back_first() {
    let mut rng = Rng::from_seed([12; 48]);
    let (side, _, _) = direct_init(2, &mut rng);
    let bufs = (RelayBuf::new(4096), RelayBuf::new(4096));
    let mut relay = Relay::with_client(
        side,
        2,
        LinkKind::WsPackets,
        bufs.0,
        bufs.1,
        false,
        &mut rng,
    );
    relay.keep_replay(Some(RelayBuf::new(4096)));
    assert!(
        relay.waiting_since().is_none() && !relay.replayable(),
        "no replay in pass-through"
    );
    relay.reencrypt(&mut rng);
    assert_eq!(relay.mode(), RelayMode::Reencrypt);
    relay.keep_replay(Some(RelayBuf::new(4096)));
    assert!(relay.replayable());
    assert_eq!(RelayMode::PassThrough.name(), "passthrough");
}

#[test]
fn client_side_accessors() {
    let mut rng = Rng::from_seed([13; 48]);
    let (side, _, _) = direct_init(-3, &mut rng);
    assert_eq!(
        (side.tag(), side.packet_dc()),
        (Tag::Intermediate, Some(-3))
    );
    let side = side.reencrypted();
    assert!(matches!(side, ClientSide::Proxy(_)));
    let plain = ClientSide::Plain(Tag::Abridged);
    assert_eq!((plain.tag(), plain.packet_dc()), (Tag::Abridged, None));
}

/// What the cheap modes save, for callgrind (BENCHMARKS.md "Relay modes"; the run: the diary in bench/history/, "Issue 21"): one relay moves
/// `TG_RELAY_COST_MIB` MiB (default 0) of 512 KiB MTProto packets down and the same up, in
/// `TG_RELAY_COST_MODE` (`reencrypt`, `passthrough`, `plain`) over `TG_RELAY_COST_LINK` (`raw`
/// or `ws`), reply check on, 16 KiB buffers and a 64 KiB scratch as the defaults give. Run with
/// `--toggle-collect` on `Relay::step` so the fake peers' own AES does not count.
#[test]
#[ignore = "a measurement, run under callgrind (BENCHMARKS.md)"]
fn relay_cost() {
    let var = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let mib: usize = var("TG_RELAY_COST_MIB", "0").parse().unwrap();
    let side = match var("TG_RELAY_COST_MODE", "reencrypt").as_str() {
        "passthrough" => Side::Direct,
        "plain" => Side::Plain,
        _ => Side::Proxy,
    };
    let kind = match var("TG_RELAY_COST_LINK", "raw").as_str() {
        "ws" => LinkKind::WsPackets,
        _ => LinkKind::Raw,
    };
    let mut rig = Rig::with_side(kind, (1 << 16, 1 << 16), 16 * 1024, side);
    // Replies are checked here, as in a real session.
    let mut rng = Rng::from_seed([14; 48]);
    if side == Side::Direct {
        let (cs, enc, dec) = direct_init(2, &mut rng);
        rig.app_enc = enc;
        rig.app_dec = dec;
        let bufs = (RelayBuf::new(16 * 1024), RelayBuf::new(16 * 1024));
        rig.relay = Relay::with_client(cs, 2, kind, bufs.0, bufs.1, false, &mut rig.rng);
    } else if side == Side::Proxy {
        let i = initiate(Tag::Intermediate, 2, Some(&SECRET), &mut rng);
        let bufs = (RelayBuf::new(16 * 1024), RelayBuf::new(16 * 1024));
        let accepted = accept(&i.init, &[SECRET]).unwrap();
        rig.relay = Relay::new(accepted, 2, kind, bufs.0, bufs.1, false, &mut rig.rng);
        rig.app_enc = i.encrypt;
        rig.app_dec = i.decrypt;
    } else {
        let bufs = (RelayBuf::new(16 * 1024), RelayBuf::new(16 * 1024));
        let cs = ClientSide::Plain(Tag::Intermediate);
        rig.relay = Relay::with_client(cs, 2, kind, bufs.0, bufs.1, false, &mut rig.rng);
    }
    rig.scratch = Scratch::new(64 * 1024, None);
    let mut req = vec![0u8; 8];
    req.extend(bulk(32, 1));
    rig.app_send(&encode(Tag::Intermediate, &req, &mut rng));
    assert_eq!(rig.run(), None);
    let mut body = vec![0u8; 8];
    body.extend(bulk(512 * 1024 - 8, 3));
    let packet = encode(Tag::Intermediate, &body, &mut rng);
    for _ in 0..mib * 2 {
        rig.front_data(&packet);
        rig.app_send(&packet);
        assert_eq!(rig.run(), None);
    }
    assert_eq!(rig.relay.replies(), mib as u64 * 2);
    rig.app_in.clear();
    rig.front_plain.clear();
}
