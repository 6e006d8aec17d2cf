//! The relay's memory over in-memory pipes: the scratch path (one write per header and payload,
//! fewer writes per byte, who holds the large buffer) and pooled buffers (given back when idle,
//! an exhausted pool stops reads but held data drains). The rig is the parent's.

use super::*;

#[test]
fn a_frame_header_goes_out_in_one_write_with_its_payload() {
    let mut rig = Rig::new(LinkKind::WsPackets, 64 * 1024, 64 * 1024, 16 * 1024).plain();
    rig.run();
    assert_eq!(rig.up.writes, 1, "the init message");
    let p = packet(1000, 3);
    rig.app_send(&p);
    rig.run();
    assert_eq!(rig.front_messages(), vec![p]);
    assert_eq!(rig.up.writes, 2, "header and payload in one write");
}

#[test]
fn the_scratch_cuts_writes_per_byte() {
    let mut writes = Vec::new();
    for plain in [false, true] {
        let mut rig = Rig::new(LinkKind::Raw, 256 * 1024, 256 * 1024, 16 * 1024);
        if plain {
            rig = rig.plain();
        }
        rig.run();
        let down = bulk(1 << 20, 3);
        rig.front_data(&down);
        assert_eq!(rig.run(), None);
        assert_eq!(rig.app_in, down);
        writes.push(rig.client.writes);
    }
    // 64 KiB chunks against 16 KiB ones.
    assert!(
        writes[0] * 3 <= writes[1],
        "writes with / without: {writes:?}"
    );
}

#[test]
fn a_stalled_client_keeps_the_large_buffer_until_the_rest_fits_its_own() {
    let mut rig = Rig::new(LinkKind::Raw, 1000, 64 * 1024, 4096);
    rig.run();
    assert_eq!(rig.scratch.capacity(), 4 * 4096);
    let down = bulk(50_000, 5);
    rig.front_data(&down);
    for _ in 0..5 {
        rig.pump_peers_front_only();
        let o = rig.step_ready();
        assert!(!matches!(o, Outcome::Close(_)));
    }
    // 16 KiB read, 1000 taken by the client: the rest does not fit 4 KiB, so the session keeps
    // the large buffer and the scratch holds its small one.
    assert_eq!(rig.scratch.capacity(), 4096);
    assert_eq!(rig.run(), None);
    assert_eq!(rig.app_in, down);
    assert_eq!(rig.scratch.capacity(), 4 * 4096, "given back once drained");
    // A session that closes while holding it gives it back too.
    rig.front_data(&down);
    rig.pump_peers_front_only();
    rig.step_ready();
    assert_eq!(rig.scratch.capacity(), 4096);
    rig.relay.release(&mut rig.scratch);
    assert_eq!(rig.scratch.capacity(), 4 * 4096);
}

#[test]
fn pooled_buffers_go_back_to_the_pool_when_the_session_is_idle() {
    for plain in [false, true] {
        let pool = BufPool::new(2, 4096, 2);
        let mut rig = Rig::pooled(LinkKind::WsPackets, 700, 700, &pool, plain);
        rig.run();
        let packets: Vec<Vec<u8>> = (0..20).map(|i| packet(10 + i * 301, i as u8)).collect();
        for p in &packets {
            rig.app_send(p);
        }
        let down = bulk(60_000, 3);
        for c in down.chunks(7000) {
            rig.front_data(c);
        }
        assert_eq!(rig.run(), None);
        assert_eq!(rig.front_messages(), packets, "plain={plain}");
        assert_eq!(rig.app_in, down, "plain={plain}");
        assert_eq!(
            pool.available(),
            2,
            "an idle session holds no block (plain={plain})"
        );
    }
}

#[test]
fn an_exhausted_pool_stops_reads_but_held_data_still_drains() {
    let pool = BufPool::new(2, 4096, 2);
    let mut rig = Rig::pooled(LinkKind::Raw, 1000, 64 * 1024, &pool, true);
    rig.run();
    // The app stalls: the relay's down buffer holds data (one block).
    let down = bulk(20_000, 7);
    rig.front_data(&down);
    for _ in 0..5 {
        rig.pump_peers_front_only();
        rig.step_once();
    }
    assert_eq!(pool.available(), 1);
    // Someone else takes the last block: the client's bytes are not read meanwhile.
    let mut other = RelayBuf::pooled(&pool);
    assert!(other.attach(&pool));
    assert_eq!(pool.available(), 0);
    let up = bulk(3000, 1);
    rig.app_send(&up);
    rig.pump_peers();
    let sent_before = rig.front_plain.len();
    rig.step_once();
    rig.pump_peers();
    assert_eq!(
        rig.front_plain.len(),
        sent_before,
        "no room: the client waits"
    );
    // The held data still drains to the app (no block needed to write).
    assert_eq!(rig.run(), None);
    assert_eq!(rig.app_in, down);
    // The down buffer gave its block back, so the client's bytes went through too.
    assert_eq!(rig.front_plain, up);
    other.detach_if_empty();
    assert_eq!(pool.available(), 2);
}

impl Rig {
    /// One relay step with every endpoint ready; panics on a close.
    fn step_once(&mut self) {
        let o = self.step_ready();
        assert!(!matches!(o, Outcome::Close(_)), "{o:?}");
    }
}
