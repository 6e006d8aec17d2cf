//! Running one test's body inside a network namespace the test makes itself (`unshare -rn`: a
//! new user and network namespace, where only `lo` exists): the test binary runs itself again
//! in there, filtered to that one test, and the body sees an empty network with loopback up —
//! no route anywhere else, so an address off loopback fails at once (`ENETUNREACH`) and no
//! packet can leave the machine. Inside, the body is root of its own namespace: it may set the
//! namespace's sysctls (`/proc/sys/net/...`), e.g. a tiny ephemeral port range.
//!
//! Where unprivileged namespaces are refused, the test is skipped with a loud line saying why.
//! Test code: panics on local setup failure.

use std::process::Command;

/// Set in the environment of the run inside the namespace.
const INSIDE: &str = "TGWP_TEST_IN_NETNS";

/// Runs `body` inside a fresh network namespace with `lo` up. Outside, re-runs this test
/// binary's test `name` (its full path, e.g. `local_ports_are_named_as_local`) in there and
/// asserts it passed; returns false when namespaces are refused here (said loudly: the test
/// then checks nothing on this machine).
pub fn run_inside(name: &str, body: impl FnOnce()) -> bool {
    if std::env::var_os(INSIDE).is_some() {
        lo_up();
        body();
        return true;
    }
    let probe = Command::new("unshare").args(["-rn", "true"]).output();
    let why = match &probe {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Some(format!("cannot run unshare: {e}")),
    };
    if let Some(why) = why {
        eprintln!(
            "\n*** NOTE: {name} SKIPPED: `unshare -rn` failed ({why}). It checks nothing on \
             this machine. ***\n"
        );
        return false;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new("unshare")
        .arg("-rn")
        .arg(exe)
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(INSIDE, "1")
        .output()
        .expect("run the test inside a namespace");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name} inside the namespace: {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    eprintln!("{stderr}");
    true
}

/// Brings `lo` up (a new network namespace starts with it down).
fn lo_up() {
    // SAFETY: plain ioctls on a socket we own, with a zeroed ifreq naming "lo".
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            ifr.ifr_name[i] = *b as libc::c_char;
        }
        let get = libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut ifr);
        assert_eq!(get, 0, "SIOCGIFFLAGS: {}", std::io::Error::last_os_error());
        ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        let set = libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &ifr);
        assert_eq!(set, 0, "SIOCSIFFLAGS: {}", std::io::Error::last_os_error());
        libc::close(fd);
    }
}

/// Sets this namespace's ephemeral port range (inside [`run_inside`]'s body only).
pub fn set_local_port_range(low: u16, high: u16) {
    std::fs::write(
        "/proc/sys/net/ipv4/ip_local_port_range",
        format!("{low} {high}"),
    )
    .expect("write ip_local_port_range inside the namespace");
}
