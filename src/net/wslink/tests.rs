//! White-box tests of the WS link codec: what the encoder puts on the wire, read back as a
//! server would, and what the decoder makes of a server's frames.

use super::*;

fn rng() -> Rng {
    Rng::from_seed([7; 48])
}

/// Drives `enc` over `plain` until idle; returns the wire bytes (payload masked, not encrypted).
fn encode_all(enc: &mut Encoder, plain: &mut Vec<u8>, rng: &mut Rng) -> Result<Vec<u8>, LinkError> {
    let mut wire = Vec::new();
    loop {
        match enc.next(plain, rng)? {
            Next::Frame(s) => wire.extend_from_slice(s.as_bytes()),
            Next::Payload(n) => {
                let mut p: Vec<u8> = plain.drain(..n).collect();
                enc.mask(&mut p);
                wire.extend_from_slice(&p);
            }
            Next::Idle => return Ok(wire),
        }
    }
}

/// Parses masked client frames as a server: (opcode, unmasked payload) per frame.
fn server_read(mut wire: &[u8]) -> Vec<(Opcode, Vec<u8>)> {
    let mut out = Vec::new();
    while !wire.is_empty() {
        let (h, hl) = parse_header(wire).unwrap().expect("whole header");
        let mask = h.mask.expect("client frames are masked");
        let end = hl + h.len as usize;
        let mut p = wire[hl..end].to_vec();
        apply_mask(&mut p, mask, 0);
        assert!(h.fin);
        out.push((h.opcode, p));
        wire = &wire[end..];
    }
    out
}

fn intermediate(payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

fn server_frame(opcode: Opcode, payload: &[u8]) -> Vec<u8> {
    let mut hdr = [0u8; MAX_HEADER];
    let h = Header {
        fin: true,
        opcode,
        mask: None,
        len: payload.len() as u64,
    };
    let n = format_header(&h, &mut hdr);
    let mut v = hdr[..n].to_vec();
    v.extend_from_slice(payload);
    v
}

#[test]
fn one_message_per_packet_toward_the_front() {
    let mut rng = rng();
    let mut enc = Encoder::new(Split::Packets(Tag::Intermediate));
    let a = intermediate(&[1; 8]);
    let b = intermediate(&[2; 300]);
    let mut plain = [a.clone(), b.clone()].concat();
    // Half of the second packet first: its header is sent, its payload streams.
    let mut first: Vec<u8> = plain.drain(..a.len() + 100).collect();
    let mut wire = encode_all(&mut enc, &mut first, &mut rng).unwrap();
    assert!(first.is_empty());
    assert!(enc.in_frame());
    wire.extend(encode_all(&mut enc, &mut plain, &mut rng).unwrap());
    assert!(!enc.in_frame());
    let frames = server_read(&wire);
    assert_eq!(frames, vec![(Opcode::Binary, a), (Opcode::Binary, b)]);
}

#[test]
fn incomplete_packet_header_waits() {
    let mut rng = rng();
    let mut enc = Encoder::new(Split::Packets(Tag::Intermediate));
    assert!(matches!(enc.next(&[5, 0], &mut rng), Ok(Next::Idle)));
}

#[test]
fn stream_mode_caps_messages_at_1_mib() {
    let mut rng = rng();
    let mut enc = Encoder::new(Split::Stream);
    let mut plain = vec![9u8; MAX_STREAM_MESSAGE + 10];
    let frames = server_read(&encode_all(&mut enc, &mut plain, &mut rng).unwrap());
    let lens: Vec<usize> = frames.iter().map(|f| f.1.len()).collect();
    assert_eq!(lens, vec![MAX_STREAM_MESSAGE, 10]);
}

#[test]
fn zero_length_packet_makes_the_stream_unsplittable() {
    let mut rng = rng();
    let mut enc = Encoder::new(Split::Packets(Tag::Intermediate));
    let mut plain = vec![0, 0, 0, 0, 1, 2, 3];
    let frames = server_read(&encode_all(&mut enc, &mut plain, &mut rng).unwrap());
    assert_eq!(frames, vec![(Opcode::Binary, vec![0, 0, 0, 0, 1, 2, 3])]);
}

#[test]
fn declared_packet_over_the_limit_is_an_error() {
    let mut rng = rng();
    let mut enc = Encoder::new(Split::Packets(Tag::Intermediate));
    let len = (framing::MAX_PACKET as u32 + 1).to_le_bytes();
    assert!(matches!(
        enc.next(&len, &mut rng),
        Err(LinkError::PacketTooLong(_))
    ));
}

#[test]
fn control_frames_wait_for_the_frame_boundary() {
    let mut rng = rng();
    let mut enc = Encoder::new(Split::Packets(Tag::Intermediate));
    let pkt = intermediate(&[3; 40]);
    let mut plain = pkt[..20].to_vec();
    let mut wire = encode_all(&mut enc, &mut plain, &mut rng).unwrap();
    enc.queue_ping(b"p1");
    enc.queue_pong(b"answer"); // replaces the ping
    wire.extend(encode_all(&mut enc, &mut Vec::new(), &mut rng).unwrap());
    let mut rest = pkt[20..].to_vec();
    wire.extend(encode_all(&mut enc, &mut rest, &mut rng).unwrap());
    let frames = server_read(&wire);
    assert_eq!(
        frames,
        vec![(Opcode::Binary, pkt), (Opcode::Pong, b"answer".to_vec())]
    );
}

#[test]
fn close_is_sent_once_and_nothing_follows() {
    let mut rng = rng();
    let mut enc = Encoder::new(Split::Stream);
    enc.queue_ping(b"x");
    enc.queue_close(Some(CLOSE_NORMAL));
    enc.queue_close(Some(4000));
    enc.queue_pong(b"late");
    enc.queue_ping(b"late");
    assert!(enc.closing());
    let mut plain = b"after close".to_vec();
    let frames = server_read(&encode_all(&mut enc, &mut plain, &mut rng).unwrap());
    assert_eq!(
        frames,
        vec![(Opcode::Close, 1000u16.to_be_bytes().to_vec())]
    );
    assert!(encode_all(&mut enc, &mut plain, &mut rng)
        .unwrap()
        .is_empty());
}

#[test]
fn push_message_and_control_for_the_prober() {
    let mut rng = rng();
    let mut enc = Encoder::new(Split::Packets(Tag::Intermediate));
    let mut out = Vec::new();
    enc.push_message(&mut out, &[5; 64], &mut rng);
    enc.push_control(&mut out, &mut rng); // nothing queued
    enc.queue_pong(b"pp");
    enc.push_control(&mut out, &mut rng);
    let small = enc.small_message(&[6; 3], &mut rng);
    out.extend_from_slice(small.as_bytes());
    assert_eq!(
        server_read(&out),
        vec![
            (Opcode::Binary, vec![5; 64]),
            (Opcode::Pong, b"pp".to_vec()),
            (Opcode::Binary, vec![6; 3])
        ]
    );
}

#[test]
fn decoder_strips_headers_and_counts_payload() {
    let mut enc = Encoder::new(Split::Stream);
    let mut dec = Decoder::new();
    let mut input = server_frame(Opcode::Binary, &[1; 200]);
    input.extend(server_frame(Opcode::Continuation, &[2; 3]));
    assert_eq!(dec.next(&input, &mut enc), Ok(Event::Header(4)));
    // A partial payload is handed out as it arrives.
    assert_eq!(dec.next(&input[4..54], &mut enc), Ok(Event::Payload(50)));
    assert!(dec.in_frame());
    assert_eq!(dec.next(&input[54..], &mut enc), Ok(Event::Payload(150)));
    assert_eq!(dec.next(&input[204..], &mut enc), Ok(Event::Header(2)));
    assert_eq!(dec.next(&input[206..], &mut enc), Ok(Event::Payload(3)));
    assert_eq!(dec.next(&[], &mut enc), Ok(Event::NeedMore));
}

#[test]
fn decoder_answers_ping_and_close() {
    let mut rng = rng();
    let mut enc = Encoder::new(Split::Stream);
    let mut dec = Decoder::new();
    let ping = server_frame(Opcode::Ping, b"hi");
    assert_eq!(dec.next(&ping[..3], &mut enc), Ok(Event::NeedMore));
    assert_eq!(dec.next(&ping, &mut enc), Ok(Event::Control(4)));
    let pong = server_frame(Opcode::Pong, b"x");
    assert_eq!(dec.next(&pong, &mut enc), Ok(Event::Control(3)));
    let close = server_frame(Opcode::Close, &4001u16.to_be_bytes());
    assert_eq!(dec.next(&close, &mut enc), Ok(Event::Closed(4001, 4)));
    let frames = server_read(&encode_all(&mut enc, &mut Vec::new(), &mut rng).unwrap());
    // The pong waited in the slot; the Close replaced it (nothing is sent after a Close anyway).
    assert_eq!(
        frames,
        vec![(Opcode::Close, 4001u16.to_be_bytes().to_vec())]
    );
    let mut dec = Decoder::new();
    let mut enc = Encoder::new(Split::Stream);
    assert_eq!(
        dec.next(&server_frame(Opcode::Close, &[]), &mut enc),
        Ok(Event::Closed(0, 2))
    );
    let frames = server_read(&encode_all(&mut enc, &mut Vec::new(), &mut rng).unwrap());
    assert_eq!(frames, vec![(Opcode::Close, vec![])]);
}

#[test]
fn decoder_refuses_bad_frames() {
    let mut enc = Encoder::new(Split::Stream);
    let mut dec = Decoder::new();
    assert_eq!(
        dec.next(&server_frame(Opcode::Text, b"hi"), &mut enc),
        Err(LinkError::Text)
    );
    assert_eq!(
        dec.next(&[0x82, 0x81, 1, 2, 3, 4, 0], &mut enc),
        Err(LinkError::MaskedByServer)
    );
    assert_eq!(
        dec.next(&[0xc2, 0x00], &mut enc),
        Err(LinkError::Frame(FrameError::ReservedBits))
    );
    assert!(LinkError::Text.to_string().contains("text"));
}

#[test]
fn header_incomplete_only_for_a_partial_length_at_a_boundary() {
    let mut rng = rng();
    let enc = Encoder::new(Split::Packets(Tag::Intermediate));
    assert!(enc.header_incomplete(&[5, 0]));
    assert!(!enc.header_incomplete(&[]), "nothing pending");
    assert!(
        !enc.header_incomplete(&[1, 0, 0, 0]),
        "a whole header frames"
    );
    let abridged = Encoder::new(Split::Packets(Tag::Abridged));
    assert!(abridged.header_incomplete(&[0x7f, 1]));
    assert!(!abridged.header_incomplete(&[1]));
    assert!(!Encoder::new(Split::Stream).header_incomplete(&[5, 0]));
    // Inside a frame the bytes are payload, not a header.
    let mut enc = Encoder::new(Split::Packets(Tag::Intermediate));
    let mut p = intermediate(&[9; 8]);
    assert!(matches!(enc.next(&p, &mut rng), Ok(Next::Frame(_))));
    p.truncate(2);
    assert!(!enc.header_incomplete(&p));
}

#[test]
fn decoder_refuses_invalid_close_codes_and_drops_what_follows_a_close() {
    let mut rng = rng();
    for (body, code) in [
        (999u16.to_be_bytes().to_vec(), 999),
        (1005u16.to_be_bytes().to_vec(), 1005),
        (2999u16.to_be_bytes().to_vec(), 2999),
        (5000u16.to_be_bytes().to_vec(), 5000),
        (vec![0x03], 0),
        ([&1000u16.to_be_bytes()[..], &[0xff, 0xfe]].concat(), 1000),
    ] {
        let mut enc = Encoder::new(Split::Stream);
        let mut dec = Decoder::new();
        assert_eq!(
            dec.next(&server_frame(Opcode::Close, &body), &mut enc),
            Err(LinkError::BadClose(code)),
            "{body:?}"
        );
        let frames = server_read(&encode_all(&mut enc, &mut Vec::new(), &mut rng).unwrap());
        assert_eq!(
            frames,
            vec![(Opcode::Close, 1002u16.to_be_bytes().to_vec())]
        );
    }
    for code in [1000, 1003, 1007, 1014, 3000, 4999] {
        assert!(close_code_valid(code), "{code}");
    }
    // A valid Close, then a data frame: the data is never payload.
    let mut enc = Encoder::new(Split::Stream);
    let mut dec = Decoder::new();
    let mut input = server_frame(
        Opcode::Close,
        &[&1000u16.to_be_bytes()[..], b"bye"].concat(),
    );
    let close_len = input.len();
    input.extend(server_frame(Opcode::Binary, b"after"));
    assert_eq!(
        dec.next(&input, &mut enc),
        Ok(Event::Closed(1000, close_len))
    );
    let rest = &input[close_len..];
    assert_eq!(dec.next(rest, &mut enc), Ok(Event::AfterClose(rest.len())));
    assert_eq!(dec.next(&[], &mut enc), Ok(Event::NeedMore));
}
