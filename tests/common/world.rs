//! A small routed world of three network namespaces made with `ip netns` (as root), for the
//! transparent mode's end-to-end tests: a **LAN client** (`10.21.1.2`, `fd21:1::2`), a **router**
//! (`r-lan` toward the client, `r-wan` toward Telegram; forwarding on; the proxy runs here) and
//! a **Telegram world** holding some of Telegram's own addresses (DC 2's `149.154.167.51` and
//! `2001:67c:4e8:f002::a`, a web address `149.154.167.99`) on its loopback. The addresses exist
//! only inside these namespaces: the router routes Telegram's prefixes to the Telegram world and
//! has no other route; nothing can leave the machine. Threads of the test enter a namespace
//! with [`World::within`] (`setns` on that thread only), so sockets made there belong to it.
//! Where the test is not root or `ip netns` is refused, [`World::try_new`] says SKIPPED loudly.
#![allow(dead_code)]

use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// DC 2's IPv4 address in the built-in table (docs/protocol.md §3.4).
pub const DC2_V4: &str = "149.154.167.51";
/// DC 2's IPv6 address in the built-in table.
pub const DC2_V6: &str = "2001:67c:4e8:f002::a";
/// A Telegram web address (inside 149.154.160.0/20, in no DC table).
pub const WEB_V4: &str = "149.154.167.99";
/// The LAN client's addresses.
pub const LAN_V4: &str = "10.21.1.2";
/// The router's LAN-side interface.
pub const LAN_IFACE: &str = "r-lan";

/// The three namespaces; deleted on drop.
pub struct World {
    pub lan: String,
    pub router: String,
    pub tg: String,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// Runs `sh -c script` inside namespace `ns` (`ip netns exec`); panics with its output on
/// failure.
pub fn sh_in(ns: &str, script: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-ec", script])
        .output()
        .expect("spawn ip netns exec");
    assert!(
        out.status.success(),
        "in {ns}: {script}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

impl World {
    /// Builds the world, or says why not (`SKIPPED …` on stderr) and returns `None`: only when
    /// the test is not root or the kernel refuses namespaces or veth pairs.
    pub fn try_new(test: &str) -> Option<World> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED {test}: needs root for ip netns (CI runs as root)");
            return None;
        }
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let base = format!("tgw{}x{n}", std::process::id());
        let w = World {
            lan: format!("{base}l"),
            router: format!("{base}r"),
            tg: format!("{base}t"),
        };
        for ns in [&w.lan, &w.router, &w.tg] {
            if let Err(e) = ip(&["netns", "add", ns]) {
                eprintln!("SKIPPED {test}: ip netns add refused: {e}");
                return None;
            }
        }
        let pairs = [
            ["l0", &w.lan, LAN_IFACE, &w.router],
            ["r-wan", &w.router, "t0", &w.tg],
        ];
        for [a, an, b, bn] in pairs {
            let args = [
                "link", "add", a, "netns", an, "type", "veth", "peer", "name", b, "netns", bn,
            ];
            if let Err(e) = ip(&args) {
                eprintln!("SKIPPED {test}: veth pairs refused: {e}");
                return None;
            }
        }
        sh_in(
            &w.lan,
            "ip link set lo up; ip link set l0 up
             ip addr add 10.21.1.2/24 dev l0; ip -6 addr add fd21:1::2/64 dev l0 nodad
             ip route add default via 10.21.1.1; ip -6 route add default via fd21:1::1",
        );
        sh_in(
            &w.router,
            "ip link set lo up; ip link set r-lan up; ip link set r-wan up
             ip addr add 10.21.1.1/24 dev r-lan; ip -6 addr add fd21:1::1/64 dev r-lan nodad
             ip addr add 10.21.2.1/24 dev r-wan; ip -6 addr add fd21:2::1/64 dev r-wan nodad
             echo 1 > /proc/sys/net/ipv4/ip_forward
             echo 1 > /proc/sys/net/ipv6/conf/all/forwarding
             ip route add 149.154.160.0/20 via 10.21.2.2
             ip -6 route add 2001:67c:4e8::/48 via fd21:2::2",
        );
        sh_in(
            &w.tg,
            &format!(
                "ip link set lo up; ip link set t0 up
                 ip addr add 10.21.2.2/24 dev t0; ip -6 addr add fd21:2::2/64 dev t0 nodad
                 ip addr add {DC2_V4}/32 dev lo; ip addr add {WEB_V4}/32 dev lo
                 ip -6 addr add {DC2_V6}/128 dev lo nodad
                 ip route add 10.21.1.0/24 via 10.21.2.1; ip -6 route add fd21:1::/64 via fd21:2::1"
            ),
        );
        Some(w)
    }

    /// Runs `f` on a thread inside namespace `ns`: sockets it makes belong to that namespace
    /// (and keep to it when handed back).
    pub fn within<T: Send>(&self, ns: &str, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                let file = std::fs::File::open(format!("/run/netns/{ns}"))
                    .unwrap_or_else(|e| panic!("open /run/netns/{ns}: {e}"));
                // SAFETY: a valid namespace fd; only this thread's namespace changes.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns {ns}: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .expect("thread inside a namespace panicked")
        })
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for ns in [&self.lan, &self.router, &self.tg] {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}
