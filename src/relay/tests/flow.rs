//! Payload over each link kind through the parent's rig: packets and bulk streams intact both
//! ways under backpressure, 1 MiB packets through 16 KiB buffers, the Worker's message bound,
//! pings and closes mid-packet, bad frames, oversized packets, keepalive pings, and which side a
//! reset is blamed on.

use super::*;

#[test]
fn ws_packets_intact_both_ways_under_backpressure() {
    for plain in [false, true] {
        ws_packets_intact(plain);
    }
}

fn ws_packets_intact(plain: bool) {
    // Pipes of 700 bytes and 2 KiB buffers: every direction fills and blocks many times.
    let mut rig = Rig::new(LinkKind::WsPackets, 700, 700, 2048);
    if plain {
        rig = rig.plain();
    }
    assert_eq!(rig.run(), None);
    let packets: Vec<Vec<u8>> = (0..40).map(|i| packet(4 + i * 97, i as u8)).collect();
    for p in &packets {
        rig.app_send(p);
    }
    let down = bulk(150_000, 3);
    for chunk in down.chunks(5000) {
        rig.front_data(chunk);
    }
    assert_eq!(rig.run(), None);
    assert_eq!(
        rig.front_messages(),
        packets,
        "one message per packet, intact"
    );
    assert_eq!(rig.app_in, down);
    assert_eq!(rig.meter.bytes_down, down.len() as u64);
    let up_len: usize = packets.iter().map(Vec::len).sum();
    assert_eq!(rig.meter.bytes_up, up_len as u64);
    assert_eq!(rig.meter.first_down_ms, Some(1_000));
    assert!(!rig.relay.wants_linger());
}

#[test]
fn raw_tcp_intact_both_ways_under_backpressure() {
    for plain in [false, true] {
        let mut rig = Rig::new(LinkKind::Raw, 333, 517, 1024);
        if plain {
            rig = rig.plain();
        }
        rig.run();
        let up = bulk(80_000, 9);
        let down = bulk(120_000, 1);
        rig.app_send(&up);
        rig.front_data(&down);
        assert_eq!(rig.run(), None);
        assert_eq!(rig.front_plain, up, "plain={plain}");
        assert_eq!(rig.app_in, down, "plain={plain}");
    }
}

#[test]
fn a_stalled_reader_stops_the_relay_reading_the_other_side() {
    // The app reads nothing: the relay fills its down buffer and the pipes, then stops.
    let mut rig = Rig::new(LinkKind::Raw, 1000, 1000, 4096).plain();
    rig.run();
    let down = bulk(50_000, 5);
    rig.front_data(&down);
    for _ in 0..50 {
        rig.pump_peers_front_only();
        let o = rig.step_ready();
        assert!(!matches!(o, Outcome::Close(_)));
    }
    // App pipe (1000) + relay buffer (4096) + up pipe (1000) held; the rest still queued at the
    // front: the relay did not read more than it could hold.
    assert_eq!(rig.app.pending(), 1000);
    assert!(rig.front_out.len() >= down.len() - 1000 - 4096 - 1000);
    assert_eq!(rig.run(), None);
    assert_eq!(rig.app_in, down);
}

#[test]
fn one_mib_packets_and_frames_stream_through_16_kib_buffers() {
    let mut rig = Rig::new(LinkKind::WsPackets, 64 * 1024, 64 * 1024, 16 * 1024);
    rig.run();
    let big = packet(1 << 20, 77);
    rig.app_send(&big);
    let down = bulk(1 << 20, 8);
    rig.front_data(&down); // one 1 MiB frame
    assert_eq!(rig.run(), None);
    assert_eq!(rig.front_messages(), vec![big]);
    assert_eq!(rig.app_in, down);
}

#[test]
fn worker_stream_messages_are_at_most_1_mib() {
    let mut rig = Rig::new(LinkKind::WsStream, 256 * 1024, 256 * 1024, 16 * 1024);
    rig.run();
    let up = bulk(2 * (1 << 20) + 12345, 2);
    rig.app_send(&up);
    assert_eq!(rig.run(), None);
    assert_eq!(rig.front_plain, up);
    assert!(rig
        .frames
        .iter()
        .all(|f| f.len <= wslink::MAX_STREAM_MESSAGE));
    assert!(rig.frames.len() >= 3);
}

#[test]
fn ping_mid_packet_is_answered_at_the_next_frame_boundary() {
    let mut rig = Rig::new(LinkKind::WsPackets, 4096, 4096, 4096);
    rig.run();
    let p = packet(1000, 1);
    rig.app_send(&p[..300]);
    rig.run();
    // The front pings while the client's packet is half sent, and splits its own packet in two
    // fragments with a ping between them.
    rig.front_frame(0x89, b"ping-1");
    let down = bulk(600, 4);
    let mut c = down.clone();
    rig.front_enc.as_mut().unwrap().apply(&mut c);
    rig.front_frame(0x02, &c[..250]); // binary, FIN clear
    rig.front_frame(0x89, b"ping-2");
    rig.front_frame(0x80, &c[250..]); // continuation, FIN
    assert_eq!(rig.run(), None);
    assert_eq!(rig.app_in, down, "payload intact around the ping");
    assert!(
        rig.controls().is_empty(),
        "no pong inside the client's frame"
    );
    rig.app_send(&p[300..]);
    assert_eq!(rig.run(), None);
    assert_eq!(rig.front_messages(), vec![p]);
    // The newer pong replaced the older one (RFC 6455 §5.5.3).
    assert_eq!(rig.controls(), vec![(Opcode::Pong, b"ping-2".to_vec())]);
}

#[test]
fn close_mid_packet_delivers_what_came_and_reports_the_code() {
    let mut rig = Rig::new(LinkKind::WsPackets, 4096, 4096, 4096);
    rig.run();
    let down = bulk(500, 6);
    let mut c = down.clone();
    rig.front_enc.as_mut().unwrap().apply(&mut c);
    rig.front_frame(0x02, &c[..200]);
    rig.front_frame(0x88, &1001u16.to_be_bytes());
    rig.front_frame(0x80, &c[200..]); // after its Close: never relayed
    assert_eq!(rig.run(), Some(CloseReason::WsClose(1001)));
    assert_eq!(rig.app_in, down[..200]);
    assert_eq!(
        rig.controls(),
        vec![(Opcode::Close, 1001u16.to_be_bytes().to_vec())],
        "the Close is echoed"
    );
}

#[test]
fn bad_frames_from_the_front_are_protocol_errors() {
    let cases: [(&str, u8, &[u8]); 4] = [
        ("text", 0x81, b"hi"),
        ("reserved bits", 0xc2, b"xx"),
        ("reserved opcode", 0x83, b""),
        ("fragmented ping", 0x09, b""),
    ];
    for (what, b0, payload) in cases {
        let mut rig = Rig::new(LinkKind::WsPackets, 2048, 2048, 4096);
        rig.run();
        rig.front_frame(b0, payload);
        assert_eq!(rig.run(), Some(CloseReason::ProtocolError), "{what}");
    }
    // A masked server frame.
    let mut rig = Rig::new(LinkKind::WsPackets, 2048, 2048, 4096);
    rig.run();
    rig.front_out.extend([0x82, 0x81, 1, 2, 3, 4, 0]);
    assert_eq!(rig.run(), Some(CloseReason::ProtocolError));
}

#[test]
fn oversized_client_packet_is_a_protocol_error() {
    let mut rig = Rig::new(LinkKind::WsPackets, 2048, 2048, 4096);
    rig.run();
    rig.app_send(&(17u32 << 20).to_le_bytes());
    assert_eq!(rig.run(), Some(CloseReason::ProtocolError));
}

#[test]
fn keepalive_ping_goes_out_at_a_boundary_and_not_on_raw() {
    let mut rig = Rig::new(LinkKind::WsStream, 2048, 2048, 4096);
    rig.run();
    rig.relay.queue_ping(0x1_0000_0102);
    rig.run();
    assert_eq!(rig.controls(), vec![(Opcode::Ping, vec![0, 0, 1, 2])]);
    let mut raw = Rig::new(LinkKind::Raw, 2048, 2048, 4096);
    raw.run();
    raw.relay.queue_ping(5);
    raw.app_send(b"abcd");
    raw.run();
    assert_eq!(raw.front_plain, b"abcd", "no frame bytes in a raw stream");
}

#[test]
fn resets_name_the_side() {
    let mut rig = Rig::new(LinkKind::Raw, 2048, 2048, 4096);
    rig.run();
    rig.app.reset();
    assert_eq!(rig.run(), Some(CloseReason::ClientReset));
    let mut rig = Rig::new(LinkKind::Raw, 2048, 2048, 4096);
    rig.run();
    rig.front.reset();
    assert_eq!(rig.run(), Some(CloseReason::UpstreamReset));
}
