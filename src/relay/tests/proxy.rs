//! The relay toward an upstream MTProto proxy (`Relay::init_toward_proxy`, the `mtproto` tier):
//! its init is a client's (hashed with the proxy's secret, the client's tag, the DC index as a
//! client writes it), and the stream both ways is re-encrypted with the ciphers of that init.

use std::io::{Read, Write};

use super::*;

#[test]
fn the_init_toward_a_proxy_is_a_clients_and_the_stream_follows_it() {
    let proxy_key = [0x5au8; 16];
    let mut rng = Rng::from_seed([7; 48]);
    let app = initiate(Tag::Abridged, -10002, Some(&SECRET), &mut rng);
    let (mut app_enc, mut app_dec) = (app.encrypt, app.decrypt);
    let accepted = accept(&app.init, &[SECRET]).unwrap();
    let bufs = (RelayBuf::new(4096), RelayBuf::new(4096));
    let mut relay = Relay::new(accepted, -2, LinkKind::Raw, bufs.0, bufs.1, false, &mut rng);
    relay.init_toward_proxy(&proxy_key, -10002, &mut rng);
    let (mut client, mut app_end) = pair(1 << 16, 1 << 16);
    let (mut up, mut proxy_end) = pair(1 << 16, 1 << 16);
    let mut scratch = Scratch::new(1, None);
    let mut meter = Meter::default();
    let mut c = b"\x0ahello upstream, forty bytes of abridged".to_vec();
    app_enc.apply(&mut c);
    app_end.write_all(&c).unwrap();
    let ready = Ready {
        read: true,
        write: true,
    };
    let mut step = |relay: &mut Relay, client: &mut PipeEnd, up: &mut PipeEnd| {
        for _ in 0..10 {
            let (mut a, mut b) = (ready, ready);
            let _ = relay.step(
                client,
                &mut a,
                up,
                &mut b,
                &mut meter,
                &mut scratch,
                0,
                &mut rng,
            );
        }
    };
    step(&mut relay, &mut client, &mut up);
    let mut got = vec![0u8; 64 + c.len()];
    proxy_end.read_exact(&mut got).unwrap();
    let init: [u8; 64] = got[..64].try_into().unwrap();
    assert!(accept_raw(&init).map_or(true, |a| a.tag != Tag::Abridged || a.dc != -2));
    let mut seen = accept(&init, &[proxy_key]).expect("the proxy's side decodes the init");
    assert_eq!((seen.tag, seen.dc), (Tag::Abridged, -10002));
    let mut plain = got[64..].to_vec();
    seen.decrypt.apply(&mut plain);
    assert_eq!(&plain, b"\x0ahello upstream, forty bytes of abridged");
    // Down: the proxy's bytes reach the app under the app's own cipher.
    let mut d = b"\x01resp".to_vec();
    seen.encrypt.apply(&mut d);
    proxy_end.write_all(&d).unwrap();
    step(&mut relay, &mut client, &mut up);
    let mut back = [0u8; 5];
    app_end.read_exact(&mut back).unwrap();
    app_dec.apply(&mut back);
    assert_eq!(&back, b"\x01resp");
}
