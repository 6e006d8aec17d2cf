//! A session on a pooled upstream (docs/design.md §4 "Pools", §5): the wait for the upstream's
//! first byte with injected time, the replayable prefix and its bound, and a rewind whose
//! request reaches a fresh upstream under that upstream's own relay init, intact, while the
//! client sees only its answer. The rig is the parent's.

use super::*;

/// Carries a rewound session on over a fresh `kind` upstream with `down` as its downstream
/// buffer: the relay [`Relay::new`] builds from `resume`, the rig pointed at it by [`refront`].
fn resume_on(rig: &mut Rig, resume: crate::relay::Resume, kind: LinkKind, down: RelayBuf) {
    let relay = Relay::with_client(
        resume.side,
        2,
        kind,
        resume.up,
        down,
        resume.client_eof,
        &mut rig.rng,
    );
    refront(rig, relay);
}

/// Points the rig at a fresh upstream (new pipes, a fake front that has seen nothing) relayed
/// by `relay`.
fn refront(rig: &mut Rig, mut relay: Relay) {
    relay.trust_replies();
    rig.relay = relay;
    let (up, front) = pair(4096, 4096);
    rig.up = up;
    rig.front = front;
    rig.front_enc = None;
    rig.front_dec = None;
    rig.front_raw.clear();
    rig.front_out.clear();
    rig.front_plain.clear();
    rig.frames.clear();
}

#[test]
fn the_wait_for_a_pooled_upstreams_first_byte_starts_when_the_request_goes_out() {
    let mut rig = Rig::new(LinkKind::WsPackets, 4096, 4096, 4096);
    rig.relay.keep_replay(Some(RelayBuf::new(4096)));
    rig.run();
    assert_eq!(
        rig.relay.waiting_since(),
        None,
        "the client sent nothing yet"
    );
    rig.now = 1_500;
    rig.app_send(&packet(40, 1));
    assert_eq!(rig.run(), None);
    assert_eq!(rig.relay.waiting_since(), Some(1_500));
    assert!(!rig.relay.silent_past(2_000, 3_499));
    assert!(rig.relay.silent_past(2_000, 3_500));
    // More requests do not move the start of the wait.
    rig.now = 2_000;
    rig.app_send(&packet(40, 2));
    assert_eq!(rig.run(), None);
    assert_eq!(rig.relay.waiting_since(), Some(1_500));
    assert!(rig.relay.replayable());
    // The first upstream byte ends the wait and drops the prefix.
    rig.front_data(&packet(8, 3));
    assert_eq!(rig.run(), None);
    assert_eq!(rig.relay.waiting_since(), None);
    assert!(!rig.relay.replayable());
    assert!(!rig.relay.silent_past(2_000, 1_000_000));
}

#[test]
fn a_dialled_upstream_keeps_nothing_and_never_waits() {
    let mut rig = Rig::new(LinkKind::Raw, 4096, 4096, 4096);
    rig.run();
    rig.app_send(&packet(40, 1));
    assert_eq!(rig.run(), None);
    assert_eq!(rig.relay.waiting_since(), None);
    assert!(!rig.relay.replayable());
    assert!(!rig.relay.silent_past(0, u64::MAX));
}

#[test]
fn a_silent_pooled_upstream_is_rewound_and_the_request_replayed_on_a_fresh_one() {
    for kind in [LinkKind::WsPackets, LinkKind::Raw] {
        let mut rig = Rig::new(kind, 4096, 4096, 4096);
        rig.relay.keep_replay(Some(RelayBuf::new(4096)));
        rig.run();
        let packets: Vec<Vec<u8>> = (0..5).map(|i| packet(60 + i * 200, i as u8)).collect();
        for p in &packets {
            rig.app_send(p);
        }
        assert_eq!(rig.run(), None);
        assert_eq!(
            rig.front_plain,
            packets.concat(),
            "{kind:?}: the dead one got it"
        );
        assert!(rig.relay.replayable());
        // The deadline: rewind onto a fresh upstream.
        let old = std::mem::replace(
            &mut rig.relay,
            Relay::new(
                accept(
                    &initiate(Tag::Intermediate, 2, Some(&SECRET), &mut rig.rng).init,
                    &[SECRET],
                )
                .unwrap(),
                2,
                kind,
                RelayBuf::new(16),
                RelayBuf::new(16),
                false,
                &mut rig.rng,
            ),
        );
        let resume = old.rewind(&mut rig.scratch).expect("replayable");
        assert!(!resume.client_eof);
        assert_eq!(resume.up.unprocessed(), &packets.concat()[..]);
        resume_on(&mut rig, resume, kind, RelayBuf::new(4096));
        assert_eq!(rig.run(), None);
        // A fresh init (take_init checks it), then the whole request again, framed anew.
        assert_eq!(
            rig.front_plain,
            packets.concat(),
            "{kind:?}: replayed intact"
        );
        if kind == LinkKind::WsPackets {
            assert_eq!(rig.front_messages(), packets, "one message per packet");
        }
        // The client keeps talking and gets its answer, its own ciphers carried over.
        let more = packet(30, 9);
        rig.app_send(&more);
        let answer = packet(100, 7);
        rig.front_data(&answer);
        assert_eq!(rig.run(), None);
        assert_eq!(
            rig.app_in, answer,
            "{kind:?}: the client sees only its answer"
        );
        assert!(rig.front_plain.ends_with(&more));
    }
}

#[test]
fn a_request_larger_than_the_replay_bound_cannot_be_replayed() {
    let mut rig = Rig::new(LinkKind::WsPackets, 8192, 8192, 8192);
    rig.relay.keep_replay(Some(RelayBuf::new(1024)));
    rig.run();
    rig.app_send(&packet(600, 1));
    assert_eq!(rig.run(), None);
    assert!(rig.relay.replayable(), "600 bytes fit in 1 KiB");
    rig.app_send(&packet(600, 2));
    assert_eq!(rig.run(), None);
    assert!(!rig.relay.replayable(), "1.2 KB do not");
    // Still waiting (the shell closes the session at the deadline), nothing to rewind.
    assert_eq!(rig.relay.waiting_since(), Some(1_000));
    assert!(rig.relay.silent_past(2_000, 3_000));
    let mut scratch = Scratch::new(1, None);
    let relay = std::mem::replace(&mut rig.relay, Rig::new(LinkKind::Raw, 1, 1, 16).relay);
    assert!(relay.rewind(&mut scratch).is_none());
}

#[test]
fn without_a_free_replay_buffer_the_wait_is_tracked_but_nothing_replays() {
    let mut rig = Rig::new(LinkKind::Raw, 4096, 4096, 4096);
    rig.relay.keep_replay(None);
    rig.run();
    rig.app_send(&packet(10, 1));
    assert_eq!(rig.run(), None);
    assert_eq!(rig.relay.waiting_since(), Some(1_000));
    assert!(!rig.relay.replayable());
}

#[test]
fn a_replay_buffer_comes_from_the_replay_pool_and_goes_back_when_dropped() {
    let main = BufPool::new(2, 4096, 0);
    let replay = BufPool::new(1, 4096, 0);
    let scratch = Scratch::new(1, Some(main.clone())).with_replay(replay.clone());
    let a = scratch.replay_buffer().expect("one block");
    assert!(scratch.replay_buffer().is_none(), "bounded: one at a time");
    assert_eq!(main.available(), 2, "never the sessions' own blocks");
    drop(a);
    assert_eq!(replay.available(), 1);
    assert!(Scratch::new(1, None).replay_buffer().is_none());
}

#[test]
fn a_request_too_large_to_replay_is_not_silent_while_the_upstream_keeps_taking_it() {
    // A slow uplink: the upstream takes the 20 KB request 1000 bytes per 500 ms. It is alive,
    // only slow; it must not be taken for dead 2 s after the first bytes while it still takes
    // them. Once it stops taking bytes, the wait runs from the last ones it took.
    let mut rig = Rig::new(LinkKind::Raw, 4096, 1000, 4096).plain();
    rig.relay.keep_replay(Some(RelayBuf::new(1024)));
    rig.app_send(&packet(20_000, 1));
    let mut last_taken = None;
    for i in 0..12u64 {
        rig.now = 1_000 + i * 500;
        push(&mut rig.app, &mut rig.app_out);
        for _ in 0..4 {
            assert!(!matches!(rig.step_ready(), Outcome::Close(_)));
        }
        // The front takes what the pipe holds (1000 bytes at most).
        let mut buf = [0u8; 2048];
        let mut took = 0;
        while let Ok(n @ 1..) = rig.front.read(&mut buf) {
            took += n;
        }
        if took > 0 {
            last_taken = Some(rig.now);
        }
        assert!(!rig.relay.replayable(), "20 KB do not fit in 1 KiB");
        assert!(
            !rig.relay.silent_past(2_000, rig.now),
            "taken for dead at {} while the upstream keeps taking the request",
            rig.now
        );
    }
    assert_eq!(
        last_taken,
        Some(6_500),
        "still taking it at the end of the loop"
    );
    // The relay fills the pipe the front emptied last, then the front stops taking bytes (the
    // flow died): the wait now counts from the last bytes that went out.
    for now in [7_000, 7_500, 8_000] {
        rig.now = now;
        for _ in 0..4 {
            assert!(!matches!(rig.step_ready(), Outcome::Close(_)));
        }
    }
    assert_eq!(rig.relay.waiting_since(), Some(7_000));
    assert!(!rig.relay.silent_past(2_000, 8_999));
    assert!(rig.relay.silent_past(2_000, 9_000));
}

#[test]
fn a_packet_half_sent_at_the_deadline_is_replayed_whole_and_finished_by_the_client() {
    // The client's second packet is split across reads, and only its first part came before
    // the deadline: the fresh upstream gets every packet whole, one message each, framed anew.
    for kind in [LinkKind::WsPackets, LinkKind::WsStream, LinkKind::Raw] {
        let mut rig = Rig::new(kind, 4096, 4096, 4096);
        rig.relay.keep_replay(Some(RelayBuf::new(4096)));
        rig.run();
        let (a, b) = (packet(300, 1), packet(900, 2));
        rig.app_send(&a);
        rig.app_send(&b[..250]);
        assert_eq!(rig.run(), None);
        let old = std::mem::replace(&mut rig.relay, Rig::new(kind, 16, 16, 16).relay);
        let resume = old.rewind(&mut rig.scratch).expect("replayable");
        resume_on(&mut rig, resume, kind, RelayBuf::new(4096));
        assert_eq!(rig.run(), None);
        rig.app_send(&b[250..]);
        let c = packet(40, 3);
        rig.app_send(&c);
        assert_eq!(rig.run(), None);
        let all = [a.clone(), b.clone(), c.clone()];
        assert_eq!(rig.front_plain, all.concat(), "{kind:?}");
        if kind == LinkKind::WsPackets {
            assert_eq!(rig.front_messages(), all.to_vec(), "one message per packet");
        }
        let answer = packet(64, 9);
        rig.front_data(&answer);
        assert_eq!(rig.run(), None);
        assert_eq!(rig.app_in, answer, "{kind:?}");
    }
}

#[test]
fn replay_blocks_come_back_over_many_rewinds() {
    // 200 sessions on dead pooled upstreams, one replay block between them: each takes it,
    // rewinds, replays; the block is back once the replayed request went out, never leaked.
    let main = BufPool::new(4, 4096, 0);
    let replay = BufPool::new(1, 4096, 0);
    for i in 0..200u32 {
        let mut rig = Rig::pooled(LinkKind::WsPackets, 4096, 4096, &main, false);
        rig.scratch = Scratch::new(4 * 4096, Some(main.clone())).with_replay(replay.clone());
        let buf = rig.scratch.replay_buffer();
        assert!(buf.is_some(), "session {i}: the block was not given back");
        rig.relay.keep_replay(buf);
        rig.run();
        let req = packet(100 + (i as usize % 7) * 300, i as u8);
        rig.app_send(&req);
        assert_eq!(rig.run(), None);
        assert_eq!(replay.available(), 0, "held while the wait lasts");
        let old = std::mem::replace(&mut rig.relay, Rig::new(LinkKind::Raw, 16, 16, 16).relay);
        let resume = old.rewind(&mut rig.scratch).expect("replayable");
        let down = rig.scratch.own_buffer(4096);
        resume_on(&mut rig, resume, LinkKind::WsPackets, down);
        assert_eq!(rig.run(), None);
        assert_eq!(rig.front_plain, req, "session {i}");
        assert_eq!(replay.available(), 1, "session {i}: sent, so given back");
        // Every session's own blocks are back once it is dropped.
        let mut scratch = std::mem::replace(&mut rig.scratch, Scratch::new(1, None));
        rig.relay.release(&mut scratch);
        drop(rig);
        drop(scratch);
        assert_eq!(main.available(), 4, "session {i}");
    }
}

#[test]
fn a_silent_client_holds_no_replay_block() {
    // A pooled session whose client has sent nothing yet has nothing to replay: it must not
    // hold one of the few replay blocks (up to its idle timeout) that others need.
    let replay = BufPool::new(1, 4096, 0);
    let mut rig = Rig::new(LinkKind::WsPackets, 4096, 4096, 4096);
    rig.scratch = Scratch::new(4 * 4096, None).with_replay(replay.clone());
    rig.relay.arm_replay(&rig.scratch);
    assert_eq!(rig.run(), None);
    assert_eq!(replay.available(), 1, "nothing sent, nothing held");
    assert_eq!(rig.relay.waiting_since(), None);
    // The first client bytes take it, and the prefix is whole.
    rig.now = 1_200;
    let req = packet(500, 1);
    rig.app_send(&req);
    assert_eq!(rig.run(), None);
    assert_eq!(replay.available(), 0);
    assert_eq!(rig.relay.waiting_since(), Some(1_200));
    assert!(rig.relay.replayable());
    let old = std::mem::replace(&mut rig.relay, Rig::new(LinkKind::Raw, 16, 16, 16).relay);
    let resume = old.rewind(&mut rig.scratch).expect("replayable");
    assert_eq!(resume.up.unprocessed(), &req[..]);
    // Bytes read while connecting are kept at once.
    let mut rig = Rig::new(LinkKind::Raw, 4096, 4096, 4096);
    rig.scratch = Scratch::new(4 * 4096, None).with_replay(replay.clone());
    let mut up = RelayBuf::new(4096);
    up.space()[..3].copy_from_slice(b"abc");
    up.fill(3);
    let accepted = accept(
        &initiate(Tag::Intermediate, 2, Some(&SECRET), &mut rig.rng).init,
        &[SECRET],
    )
    .unwrap();
    let mut relay = Relay::new(
        accepted,
        2,
        LinkKind::Raw,
        up,
        RelayBuf::new(64),
        false,
        &mut rig.rng,
    );
    drop(resume);
    relay.arm_replay(&rig.scratch);
    assert_eq!(replay.available(), 0, "taken for the bytes already read");
    assert!(relay.replayable());
}
