//! Black-box tests of transparent mode's firewall table and its range refresh, with the real
//! `nft` inside network namespaces the tests make (`unshare -rn`; each test runs itself again
//! in there, `common::netns`): `firewall install` creates `table inet tg_ws_proxy` (sets,
//! skip list, redirect), a second install replaces it, `remove` deletes it and only it (absent:
//! success, said); an install nft refuses (the table name held by another program's owned
//! table) leaves the firewall byte-identical; the ranges come from `--tg-ranges`, the cache or
//! the built-in list; `show --iptables` prints commands. The refresh: the proxy fetches the list
//! from a loopback HTTP server the test runs, caches it, puts it into the table's sets with nft,
//! and refuses a short list (logged once, the old list and sets kept) — `ctl status`'s
//! `tg_ranges`. Nothing leaves the namespace; no fixed sleeps.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::ctl::Ctl;
use common::{netns, run_bin, temp_dir, wait_until, Proxy, Run, SECRET};

const WAIT: Duration = Duration::from_secs(10);

/// A made-up range list (documentation and benchmarking prefixes: they exist only as text
/// in the namespace's sets), long enough to be accepted: 8 IPv4, 2 IPv6.
const LIST_A: &str = "\
198.18.0.0/24
198.18.1.0/24
198.18.2.0/24
198.18.3.0/24
198.18.4.0/24
198.18.5.0/24
198.18.6.0/24
198.18.7.0/24
2001:db8:a::/48
2001:db8:b::/48
";

fn firewall(args: &[&str]) -> Run {
    let mut argv = vec!["firewall"];
    argv.extend(args);
    run_bin(&argv, &[], WAIT)
}

/// `nft ARGS` in this namespace: stdout, panicking on failure.
fn nft(args: &[&str]) -> String {
    let out = Command::new("nft").args(args).output().expect("run nft");
    assert!(
        out.status.success(),
        "nft {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn our_table() -> Option<String> {
    let out = Command::new("nft")
        .args(["list", "table", "inet", "tg_ws_proxy"])
        .output()
        .expect("run nft");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn install_creates_the_table_reinstall_replaces_it_remove_deletes_only_it() {
    netns::run_inside(
        "install_creates_the_table_reinstall_replaces_it_remove_deletes_only_it",
        || {
            // Someone else's table, which must survive everything below.
            netns::nft("table inet other {\n\tchain c {\n\t}\n}\n");
            let r = firewall(&[
                "install",
                "--transparent",
                "0.0.0.0:1445",
                "--lan-iface",
                "lan0,lan1",
                "--transparent-skip",
                "192.168.1.10",
                "--transparent-skip",
                "fd00::/64",
            ]);
            assert_eq!(r.code, Some(0), "{r:?}");
            assert!(
                r.stdout.contains("9 IPv4 and 5 IPv6 ranges (built-in)"),
                "{r:?}"
            );
            let t = our_table().expect("table installed");
            assert!(
                t.contains("91.108.56.0/22") && t.contains("149.154.160.0/20"),
                "{t}"
            );
            assert!(
                t.contains("2001:b28:f23d::/48") && t.contains("2a0a:f280::/32"),
                "{t}"
            );
            assert!(t.contains("elements = { 192.168.1.10 }"), "{t}");
            assert!(t.contains("elements = { fd00::/64 }"), "{t}");
            assert!(t.contains("type nat hook prerouting priority dstnat; policy accept;"));
            assert!(
                t.contains("iifname != { \"lan0\", \"lan1\" }")
                    || t.contains("iifname != { \"lan1\", \"lan0\" }"),
                "{t}"
            );
            assert!(
                t.contains("ip daddr @tg4 meta l4proto tcp redirect to :1445"),
                "{t}"
            );
            assert!(
                t.contains("ip6 daddr @tg6 meta l4proto tcp redirect to :1445"),
                "{t}"
            );

            // Again with other settings: replaced, not added to.
            let r = firewall(&["install", "--transparent", "127.0.0.1:1500"]);
            assert_eq!(r.code, Some(0), "{r:?}");
            let t = our_table().expect("table still there");
            assert!(
                t.contains("redirect to :1500") && !t.contains(":1445"),
                "{t}"
            );
            assert!(
                t.contains("iifname != \"br-lan\"") || t.contains("iifname != { \"br-lan\" }"),
                "{t}"
            );
            assert!(!t.contains("192.168.1.10") && !t.contains("lan0"), "{t}");
            assert_eq!(t.matches("redirect to").count(), 2, "{t}");
            assert_eq!(nft(&["list", "tables"]).matches("tg_ws_proxy").count(), 1);

            let r = firewall(&["remove"]);
            assert_eq!(r.code, Some(0), "{r:?}");
            assert!(r.stdout.contains("removed"), "{r:?}");
            assert!(our_table().is_none());
            assert!(nft(&["list", "tables"]).contains("table inet other"));
            // Absent: success, and said.
            let r = firewall(&["remove"]);
            assert_eq!(r.code, Some(0), "{r:?}");
            assert!(r.stderr.contains("not installed"), "{r:?}");
            assert!(nft(&["list", "tables"]).contains("table inet other"));
        },
    );
}

/// `nft -c` refuses the install when another program holds the name: a table with `flags
/// owner` belongs to the netlink socket that made it (here a running `nft -i`), and nobody
/// else may replace or delete it. The applet exits 1 with nft's message; the ruleset is byte
/// for byte what it was.
#[test]
fn an_install_nft_refuses_leaves_the_firewall_as_it_was() {
    netns::run_inside(
        "an_install_nft_refuses_leaves_the_firewall_as_it_was",
        || {
            let mut holder = Command::new("nft")
                .arg("-i")
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("nft -i");
            let mut stdin = holder.stdin.take().unwrap();
            writeln!(stdin, "add table inet tg_ws_proxy {{ flags owner; }}").unwrap();
            writeln!(stdin, "add chain inet tg_ws_proxy theirs").unwrap();
            stdin.flush().unwrap();
            assert!(
                wait_until(WAIT, || our_table().is_some_and(|t| t.contains("theirs"))),
                "the owned table did not appear"
            );
            let before = nft(&["list", "ruleset"]);
            let r = firewall(&["install", "--transparent", "0.0.0.0:1445"]);
            assert_eq!(r.code, Some(1), "{r:?}");
            assert!(r.stderr.contains("nft refused the table"), "{r:?}");
            assert!(
                r.stderr.contains("Operation not permitted"),
                "nft's message: {r:?}"
            );
            assert_eq!(nft(&["list", "ruleset"]), before);
            drop(stdin);
            let _ = holder.wait();
        },
    );
}

#[test]
fn without_nft_install_and_remove_say_so_and_a_missing_interface_is_named() {
    // Before any nft run: no namespace needed, and nothing is changed anywhere.
    for verb in ["install", "remove"] {
        let r = firewall(&[
            verb,
            "--transparent",
            "[::]:1444",
            "--nft",
            "/nonexistent/nft",
        ]);
        assert_eq!(r.code, Some(1), "{verb}: {r:?}");
        assert!(
            r.stderr.contains("/nonexistent/nft not found")
                && r.stderr.contains("install nftables"),
            "{verb}: {}",
            r.stderr
        );
        assert!(
            !r.stderr.contains("refused"),
            "nft refused nothing: {}",
            r.stderr
        );
    }
    let r = firewall(&[
        "install",
        "--transparent",
        "[::]:1444",
        "--lan-iface",
        "nosuchif0",
        "--nft",
        "/nonexistent/nft",
    ]);
    assert!(
        r.stderr.contains("interface nosuchif0 does not exist now"),
        "{}",
        r.stderr
    );
}

#[test]
fn ranges_come_from_the_file_else_the_cache_else_built_in() {
    netns::run_inside(
        "ranges_come_from_the_file_else_the_cache_else_built_in",
        || {
            let dir = temp_dir();
            let file = dir.join("cidr.txt");
            std::fs::write(&file, LIST_A).unwrap();
            let cache = dir.join("cache.txt");
            let mut b = LIST_A.replace("198.18.7.0/24", "198.19.9.0/24");
            b.push_str("2001:db8:c::/48\n");
            std::fs::write(&cache, &b).unwrap();
            let base = ["install", "--transparent", "0.0.0.0:1445"];

            let mut args = base.to_vec();
            let (f, c) = (file.to_str().unwrap(), cache.to_str().unwrap());
            args.extend(["--tg-ranges", f, "--tg-ranges-cache", c]);
            let r = firewall(&args);
            assert_eq!(r.code, Some(0), "{r:?}");
            let t = our_table().unwrap();
            assert!(
                t.contains("198.18.7.0/24") && !t.contains("198.19.9.0"),
                "{t}"
            );
            assert!(!t.contains("91.108.56.0/22"), "{t}");

            // Through a --config file, as the init script runs it.
            let conf = dir.join("tg-ws-proxy.conf");
            std::fs::write(
                &conf,
                format!("transparent 0.0.0.0:1446\ntg-ranges-cache {c}\nlan-iface lan9\n"),
            )
            .unwrap();
            let r = firewall(&["install", "--config", conf.to_str().unwrap()]);
            assert_eq!(r.code, Some(0), "{r:?}");
            let t = our_table().unwrap();
            assert!(
                t.contains("198.19.9.0/24") && t.contains("2001:db8:c::/48"),
                "{t}"
            );
            assert!(t.contains("redirect to :1446") && t.contains("lan9"), "{t}");

            // A cache that does not parse (too short): the built-in list.
            std::fs::write(&cache, "198.18.0.0/24\n").unwrap();
            let r = firewall(&["install", "--config", conf.to_str().unwrap()]);
            assert_eq!(r.code, Some(0), "{r:?}");
            assert!(r.stdout.contains("(built-in)"), "{r:?}");
            assert!(our_table().unwrap().contains("91.108.56.0/22"));
        },
    );
}

#[test]
fn show_prints_the_script_or_iptables_commands_and_bad_input_is_refused() {
    let r = firewall(&[
        "show",
        "--transparent",
        "0.0.0.0:1445",
        "--lan-iface",
        "lan0",
    ]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(
        r.stdout.starts_with("# tg-ws-proxy transparent mode"),
        "{r:?}"
    );
    assert!(r.stdout.contains("delete table inet tg_ws_proxy\n"));
    let r = firewall(&["show", "--iptables", "--transparent", "0.0.0.0:1445"]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.stdout.contains(
        "iptables -t nat -A TG_WS_PROXY -p tcp -d 149.154.160.0/20 -j REDIRECT --to-ports 1445"
    ));
    assert!(r.stdout.contains("-i br-lan -j TG_WS_PROXY"));
    // No --transparent: nothing to redirect to.
    let r = firewall(&["install"]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(r.stderr.contains("--transparent"), "{r:?}");
    let r = firewall(&[
        "show",
        "--transparent",
        "0.0.0.0:1445",
        "--lan-iface",
        "br lan",
    ]);
    assert_eq!(r.code, Some(2), "{r:?}");
    let r = firewall(&["flush"]);
    assert_eq!(r.code, Some(2), "{r:?}");
    let r = firewall(&["install", "--iptables", "--transparent", "0.0.0.0:1445"]);
    assert_eq!(r.code, Some(2), "{r:?}");
    // nft missing: the OS error, exit 1.
    let r = firewall(&["remove", "--nft", "/nonexistent/nft"]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("/nonexistent/nft"), "{r:?}");
}

/// A loopback HTTP server answering every GET with the current body.
fn list_server(body: Arc<Mutex<String>>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for sock in l.incoming() {
            let Ok(mut sock) = sock else { break };
            let mut r = BufReader::new(sock.try_clone().unwrap());
            let mut line = String::new();
            while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let b = body.lock().unwrap().clone();
            let _ = write!(
                sock,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{b}",
                b.len()
            );
            let _ = sock.read(&mut [0u8; 1]);
        }
    });
    port
}

/// The refresh end to end: our table installed with the built-in list; the proxy fetches
/// LIST_A from a loopback server, caches it and puts it into the table's sets; then a short
/// list is refused: logged once over several fetches, the list in force, the sets and the
/// cache unchanged.
#[test]
fn the_proxy_refreshes_the_ranges_into_the_sets_and_refuses_a_short_list() {
    netns::run_inside(
        "the_proxy_refreshes_the_ranges_into_the_sets_and_refuses_a_short_list",
        || {
            let r = firewall(&["install", "--transparent", "127.0.0.1:1445"]);
            assert_eq!(r.code, Some(0), "{r:?}");
            let body = Arc::new(Mutex::new(LIST_A.to_string()));
            let port = list_server(body.clone());
            let cache = temp_dir().join("cidr-cache.txt");
            let ctl = Ctl::new();
            let url = format!("http://127.0.0.1:{port}/cidr.txt");
            let mut args = vec![
                "--secret",
                SECRET,
                "--transparent",
                "127.0.0.1:1445",
                "--tg-ranges-url",
                &url,
                "--tg-ranges-refresh",
                "300ms",
                "--tg-ranges-retry",
                "100ms",
                "--tg-ranges-cache",
                cache.to_str().unwrap(),
            ];
            let ca = ctl.args();
            args.extend(ca.iter().map(String::as_str));
            let p = Proxy::start(&args);
            let s = ctl
                .wait(&p, WAIT, |s| {
                    s["tg_ranges"]["nft"]["ok"] == true && s["tg_ranges"]["v4"] == 8
                })
                .unwrap_or_else(|| panic!("no refresh into the sets:\n{}", p.dump()));
            let t = &s["tg_ranges"];
            assert_eq!(t["source"], url.as_str());
            assert_eq!((t["v4"].as_u64(), t["v6"].as_u64()), (Some(8), Some(2)));
            assert_eq!(t["last"]["ok"], true);
            let set = nft(&["list", "set", "inet", "tg_ws_proxy", "tg4"]);
            assert!(
                set.contains("198.18.7.0/24") && !set.contains("91.108"),
                "{set}"
            );
            let set6 = nft(&["list", "set", "inet", "tg_ws_proxy", "tg6"]);
            assert!(
                set6.contains("2001:db8:b::/48") && !set6.contains("2a0a"),
                "{set6}"
            );
            let cached = std::fs::read_to_string(&cache).unwrap();
            assert_eq!(cached, LIST_A);

            *body.lock().unwrap() = "198.18.0.0/24\n2001:db8:a::/48\n".into();
            let f0 = t["failures"].as_u64().unwrap();
            let s = ctl
                .wait(&p, WAIT, |s| {
                    s["tg_ranges"]["failures"].as_u64().unwrap_or(0) >= f0 + 3
                })
                .unwrap_or_else(|| panic!("the short list was not fetched:\n{}", p.dump()));
            let t = &s["tg_ranges"];
            assert_eq!(t["last"]["ok"], false);
            assert!(
                t["last"]["what"].as_str().unwrap().contains("too few"),
                "{t}"
            );
            assert_eq!((t["v4"].as_u64(), t["v6"].as_u64()), (Some(8), Some(2)));
            assert_eq!(nft(&["list", "set", "inet", "tg_ws_proxy", "tg4"]), set);
            assert_eq!(std::fs::read_to_string(&cache).unwrap(), LIST_A);
            // Logged once, though refused at least three times (the log line is the feature).
            assert_eq!(p.count_log("refused: too few prefixes"), 1, "{}", p.dump());
        },
    );
}

/// A sets update that failed (our table not installed yet: the init script installs it after
/// the start, from the list it finds) is retried with the next fetch, though the list is
/// unchanged by then: the sets end up holding the list in force. Regression: the list became
/// the one in force at once and every later fetch found it unchanged, so the sets kept the
/// built-in list for good.
#[test]
fn a_failed_sets_update_is_retried_with_the_next_fetch() {
    netns::run_inside(
        "a_failed_sets_update_is_retried_with_the_next_fetch",
        || {
            assert!(our_table().is_none());
            let body = Arc::new(Mutex::new(LIST_A.to_string()));
            let port = list_server(body);
            let ctl = Ctl::new();
            let url = format!("http://127.0.0.1:{port}/cidr.txt");
            let mut args = vec![
                "--secret",
                SECRET,
                "--transparent",
                "127.0.0.1:1445",
                "--tg-ranges-url",
                &url,
                "--tg-ranges-refresh",
                "300ms",
                "--tg-ranges-retry",
                "100ms",
            ];
            let ca = ctl.args();
            args.extend(ca.iter().map(String::as_str));
            let p = Proxy::start(&args);
            ctl.wait(&p, WAIT, |s| {
                s["tg_ranges"]["nft"]["ok"] == false && s["tg_ranges"]["v4"] == 8
            })
            .unwrap_or_else(|| panic!("no failed update without a table:\n{}", p.dump()));
            // The table arrives with the built-in list (no cache).
            let r = firewall(&["install", "--transparent", "127.0.0.1:1445"]);
            assert_eq!(r.code, Some(0), "{r:?}");
            let set = nft(&["list", "set", "inet", "tg_ws_proxy", "tg4"]);
            assert!(set.contains("91.108"), "{set}");
            ctl.wait(&p, WAIT, |s| s["tg_ranges"]["nft"]["ok"] == true)
                .unwrap_or_else(|| panic!("the update was not retried:\n{}", p.dump()));
            let set = nft(&["list", "set", "inet", "tg_ws_proxy", "tg4"]);
            assert!(
                set.contains("198.18.7.0/24") && !set.contains("91.108"),
                "{set}"
            );
        },
    );
}
