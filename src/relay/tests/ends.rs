//! How sessions end, over in-memory pipes: half-close in both directions, a client that closes
//! while the upstream still sends, the linger the shell must arm, a client ending inside a
//! packet, a client EOF that came during the connect phase. The rig is the parent's.

use super::*;

#[test]
fn raw_client_half_close_then_upstream_answers() {
    let mut rig = Rig::new(LinkKind::Raw, 2048, 2048, 4096);
    rig.run();
    let up = bulk(10_000, 1);
    rig.app_send(&up);
    rig.app_shut();
    assert_eq!(rig.run(), None);
    assert_eq!(rig.front_plain, up);
    assert!(rig.front.at_eof(), "FIN forwarded after the last byte");
    assert_eq!(rig.relay.end(), End::ShutSent);
    assert!(rig.relay.wants_linger());
    // The upstream keeps talking after the client's FIN: still relayed.
    let down = bulk(20_000, 2);
    rig.front_data(&down);
    assert_eq!(rig.run(), None);
    assert_eq!(rig.app_in, down);
    rig.front_shut();
    assert_eq!(rig.run(), Some(CloseReason::ClientEof));
}

#[test]
fn ws_client_half_close_sends_one_close_after_the_data() {
    let mut rig = Rig::new(LinkKind::WsPackets, 2048, 2048, 4096);
    rig.run();
    let p = packet(3000, 5);
    rig.app_send(&p);
    rig.app_shut();
    assert_eq!(rig.run(), None);
    assert_eq!(rig.front_messages(), vec![p]);
    assert_eq!(
        rig.controls(),
        vec![(Opcode::Close, 1000u16.to_be_bytes().to_vec())]
    );
    let down = bulk(7000, 3);
    rig.front_data(&down);
    rig.front_frame(0x88, &1000u16.to_be_bytes());
    assert_eq!(rig.run(), Some(CloseReason::ClientEof));
    assert_eq!(rig.app_in, down);
    assert_eq!(rig.controls().len(), 1, "Close sent once");
}

#[test]
fn upstream_end_flushes_to_a_slow_client_then_closes() {
    let mut rig = Rig::new(LinkKind::Raw, 512, 4096, 4096);
    rig.run();
    let down = bulk(3000, 8);
    rig.front_data(&down);
    rig.front_shut();
    // The app does not read yet: the relay holds the rest and lingers.
    for _ in 0..10 {
        rig.pump_peers_front_only();
        let o = rig.step_ready();
        assert!(!matches!(o, Outcome::Close(_)), "{o:?}");
    }
    assert_eq!(rig.relay.end(), End::UpstreamDone(CloseReason::UpstreamEof));
    assert!(rig.relay.wants_linger());
    assert_eq!(rig.relay.linger_reason(), CloseReason::UpstreamEof);
    assert_eq!(rig.run(), Some(CloseReason::UpstreamEof));
    assert_eq!(rig.app_in, down, "everything delivered before the close");
}

#[test]
fn client_closes_while_the_upstream_is_still_sending() {
    let mut rig = Rig::new(LinkKind::WsPackets, 1024, 1024, 2048);
    rig.run();
    let down = bulk(200_000, 4);
    for c in down.chunks(16_000) {
        rig.front_data(c);
    }
    rig.app_shut();
    assert_eq!(rig.run(), None);
    assert_eq!(rig.relay.end(), End::ShutSent);
    assert_eq!(rig.relay.linger_reason(), CloseReason::ClientEof);
    assert_eq!(
        rig.app_in, down,
        "downstream still delivered after the client's FIN"
    );
    assert_eq!(
        rig.controls(),
        vec![(Opcode::Close, 1000u16.to_be_bytes().to_vec())]
    );
    rig.front_shut();
    assert_eq!(rig.run(), Some(CloseReason::ClientEof));
}

#[test]
fn client_ending_inside_a_packet_closes_at_once() {
    let mut rig = Rig::new(LinkKind::WsPackets, 2048, 2048, 4096);
    rig.run();
    let p = packet(1000, 1);
    rig.app_send(&p[..500]);
    rig.app_shut();
    assert_eq!(rig.run(), Some(CloseReason::ClientEof));
    assert!(rig.controls().is_empty());
}

#[test]
fn client_ending_inside_a_packet_header_closes_at_once() {
    // Two of the four bytes of an intermediate length header, then EOF: the packet can never
    // be framed, so nothing would ever flush; the session must not wait for the linger timer.
    let mut rig = Rig::new(LinkKind::WsPackets, 2048, 2048, 4096);
    rig.run();
    rig.app_send(&packet(1000, 1)[..2]);
    rig.app_shut();
    assert_eq!(rig.run(), Some(CloseReason::ClientEof));
    assert!(rig.controls().is_empty());
}

#[test]
fn linger_is_wanted_only_after_one_side_ended() {
    let mut rig = Rig::new(LinkKind::WsPackets, 2048, 2048, 4096);
    assert_eq!(rig.run(), None);
    assert!(!rig.relay.wants_linger());
    rig.app_send(&packet(10, 1));
    rig.front_data(&bulk(10, 1));
    assert_eq!(rig.run(), None);
    assert!(!rig.relay.wants_linger());
    // The client ends, the front never answers: the relay waits under the linger (the shell's
    // timer bounds it) and would report the client.
    rig.app_shut();
    assert_eq!(rig.run(), None);
    assert!(rig.relay.wants_linger());
    assert_eq!(rig.relay.linger_reason(), CloseReason::ClientEof);
    assert_eq!(rig.run(), None, "nothing happens without the timer");
}

#[test]
fn client_eof_during_connect_forwards_the_bytes_then_shuts() {
    let mut rng = Rng::from_seed([1; 48]);
    let mut app = initiate(Tag::Intermediate, 2, Some(&SECRET), &mut rng);
    let accepted = accept(&app.init, &[SECRET]).unwrap();
    // Bytes read while connecting sit client-decrypted in `up`.
    let mut up = RelayBuf::new(4096);
    let mut msg = b"early bytes".to_vec();
    app.encrypt.apply(&mut msg);
    let mut acc = accepted;
    acc.decrypt.apply(&mut msg);
    up.space()[..msg.len()].copy_from_slice(&msg);
    up.fill(msg.len());
    let mut relay = Relay::new(acc, 2, LinkKind::Raw, up, RelayBuf::new(64), true, &mut rng);
    assert_eq!(relay.end(), End::ClientDone);
    let (mut client, _app_end) = pair(64, 64);
    let (mut upe, mut front) = pair(4096, 4096);
    let mut r = Ready {
        read: true,
        write: true,
    };
    let mut ur = r;
    let mut meter = Meter::default();
    let mut scratch = Scratch::new(1, None);
    let o = relay.step(
        &mut client,
        &mut r,
        &mut upe,
        &mut ur,
        &mut meter,
        &mut scratch,
        0,
        &mut rng,
    );
    assert_eq!(o, Outcome::Progress);
    assert_eq!(relay.end(), End::ShutSent);
    let mut got = vec![0u8; 200];
    let n = front.read(&mut got).unwrap();
    assert_eq!(n, 64 + 11);
    let mut init = [0u8; 64];
    init.copy_from_slice(&got[..64]);
    let mut dec = accept_raw(&init).unwrap().decrypt;
    dec.apply(&mut got[64..n]);
    assert_eq!(&got[64..n], b"early bytes");
    assert!(front.at_eof() || front.read(&mut got).unwrap() == 0);
}

#[test]
fn ws_front_close_with_a_forbidden_code_is_answered_1002_then_ends_as_protocol_error() {
    for bad in [
        &999u16.to_be_bytes()[..],
        &1005u16.to_be_bytes()[..],
        &[3u8][..],
    ] {
        let mut rig = Rig::new(LinkKind::WsPackets, 2048, 2048, 4096);
        rig.run();
        let down = bulk(700, 6);
        rig.front_data(&down);
        rig.front_frame(0x88, bad);
        // Nothing after the bad Close is relayed either.
        rig.front_data(&bulk(300, 7));
        assert_eq!(rig.run(), Some(CloseReason::ProtocolError), "{bad:?}");
        assert_eq!(rig.app_in, down, "what came before the Close is delivered");
        assert_eq!(
            rig.controls(),
            vec![(Opcode::Close, 1002u16.to_be_bytes().to_vec())],
            "{bad:?}: our Close 1002 reaches the front"
        );
    }
}
