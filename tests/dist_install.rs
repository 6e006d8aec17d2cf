//! Router packaging, black-box, OpenWrt side: `cross/dist.sh package` on the host-built binary
//! (the .ipk, the .tar.gz and SHA256SUMS: layout, control fields, byte-reproducible), and the
//! tarball's `install.sh` run for real under Debian's `busybox-static` (`busybox sh`, a PATH of
//! busybox applets only, no network applets) in a temporary root with a fake
//! /etc/openwrt_release: install, reinstall, upgrade keeping the config, an old plain-text
//! secret moved, another CPU refused, an image root for another CPU, a plain Linux's paths.
//! Entware and shellcheck: tests/dist_entware.rs; the shared rig: tests/dist/mod.rs.

mod common;
mod dist;

use std::fs;
use std::path::Path;
use std::process::Command;

use dist::*;

#[test]
fn tarball_and_ipk_have_the_documented_layout() {
    let p = pkg();
    let top = format!("tg-ws-proxy-{VERSION}-{TARGET}");

    // The tarball: one top directory with the contract's seven files, owned 0:0.
    let listing = tar_list(&["tzvf"], &p.out.join(tarball_name()));
    let mut names: Vec<String> = listing
        .iter()
        .map(|l| l.split_whitespace().last().unwrap().to_string())
        .collect();
    names.sort();
    let want: Vec<String> = [
        "",
        "README.txt",
        "S99tg-ws-proxy",
        "install.sh",
        "tg-ws-proxy",
        "tg-ws-proxy.conf.example",
        "tg-ws-proxy.config",
        "tg-ws-proxy.init",
    ]
    .iter()
    .map(|f| format!("{top}/{f}"))
    .collect();
    assert_eq!(names, want, "tarball listing:\n{}", listing.join("\n"));
    assert!(
        listing.iter().all(|l| l.contains(" 0/0 ")),
        "owners not 0/0:\n{}",
        listing.join("\n")
    );
    for exe in [
        "tg-ws-proxy",
        "install.sh",
        "tg-ws-proxy.init",
        "S99tg-ws-proxy",
    ] {
        assert_eq!(
            mode(&p.dir.join(exe)) & 0o111,
            0o111,
            "{exe} not executable"
        );
    }
    for (f, src) in [
        ("install.sh", "cross/install.sh"),
        (
            "tg-ws-proxy.init",
            "cross/openwrt/tg-ws-proxy/files/tg-ws-proxy.init",
        ),
        (
            "tg-ws-proxy.config",
            "cross/openwrt/tg-ws-proxy/files/tg-ws-proxy.config",
        ),
        ("S99tg-ws-proxy", "cross/entware/S99tg-ws-proxy"),
        ("tg-ws-proxy.conf.example", "cross/entware/tg-ws-proxy.conf"),
    ] {
        assert_eq!(
            fs::read(p.dir.join(f)).unwrap(),
            fs::read(repo().join(src)).unwrap(),
            "{f} != {src}"
        );
    }
    let readme = fs::read_to_string(p.dir.join("README.txt")).unwrap();
    assert!(
        readme.contains(TARGET) && readme.contains("install.sh"),
        "README.txt: {readme}"
    );
    assert_eq!(
        fs::read(p.dir.join("tg-ws-proxy")).unwrap(),
        fs::read(p.out.join(format!("tg-ws-proxy-{VERSION}-{TARGET}"))).unwrap(),
        "the tarball's binary is not the stripped binary artifact"
    );

    // The ipk: a gzipped tar of exactly ./debian-binary ./data.tar.gz ./control.tar.gz, in
    // ipkg-build's order.
    let ipk = p.out.join(ipk_name());
    assert_eq!(
        tar_list(&["tzf"], &ipk),
        ["./debian-binary", "./data.tar.gz", "./control.tar.gz"]
    );
    let x = Scratch::new("ipk");
    ok(Command::new("tar").arg("xzf").arg(&ipk).arg("-C").arg(&x.0));
    assert_eq!(
        fs::read_to_string(x.0.join("debian-binary")).unwrap(),
        "2.0\n"
    );
    let control_list = tar_list(&["tzf"], &x.0.join("control.tar.gz"));
    assert_eq!(
        control_list,
        ["./", "./conffiles", "./control", "./postinst", "./prerm"]
    );
    let data_list = tar_list(&["tzf"], &x.0.join("data.tar.gz"));
    assert_eq!(
        data_list,
        [
            "./",
            "./etc/",
            "./etc/config/",
            "./etc/config/tg-ws-proxy",
            "./etc/init.d/",
            "./etc/init.d/tg-ws-proxy",
            "./usr/",
            "./usr/bin/",
            "./usr/bin/tg-ws-proxy",
        ]
    );
    let c = x.0.join("c");
    let d = x.0.join("d");
    fs::create_dir_all(&c).unwrap();
    fs::create_dir_all(&d).unwrap();
    ok(Command::new("tar")
        .arg("xzf")
        .arg(x.0.join("control.tar.gz"))
        .arg("-C")
        .arg(&c));
    ok(Command::new("tar")
        .arg("xzf")
        .arg(x.0.join("data.tar.gz"))
        .arg("-C")
        .arg(&d));
    let control = fs::read_to_string(c.join("control")).unwrap();
    let field = |name: &str| -> Option<String> {
        control
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_string))
    };
    assert_eq!(
        field("Package").as_deref(),
        Some("tg-ws-proxy"),
        "{control}"
    );
    assert_eq!(field("Version").as_deref(), Some(VERSION), "{control}");
    assert_eq!(
        field("Architecture").as_deref(),
        Some("x86_64"),
        "{control}"
    );
    assert!(
        field("Maintainer").is_some_and(|m| !m.is_empty()),
        "{control}"
    );
    assert!(
        field("Description").is_some_and(|m| !m.is_empty()),
        "{control}"
    );
    assert!(
        !control.contains("Depends"),
        "a static binary depends on nothing: {control}"
    );
    let data_bytes: u64 = [
        "usr/bin/tg-ws-proxy",
        "etc/init.d/tg-ws-proxy",
        "etc/config/tg-ws-proxy",
    ]
    .iter()
    .map(|f| fs::metadata(d.join(f)).unwrap().len())
    .sum();
    assert_eq!(
        field("Installed-Size"),
        Some(data_bytes.to_string()),
        "{control}"
    );
    assert_eq!(
        fs::read_to_string(c.join("conffiles")).unwrap(),
        "/etc/config/tg-ws-proxy\n"
    );
    for s in ["postinst", "prerm"] {
        assert_eq!(mode(&c.join(s)) & 0o111, 0o111, "{s} not executable");
        let body = fs::read_to_string(c.join(s)).unwrap();
        assert!(
            body.starts_with("#!/bin/sh\n") && body.contains("IPKG_INSTROOT"),
            "{s}: {body}"
        );
    }
    let postinst = fs::read_to_string(c.join("postinst")).unwrap();
    assert!(
        postinst.contains("d=/etc/tg-ws-proxy\nf=$d/secret")
            && postinst.contains("genkey")
            && postinst.contains("/etc/init.d/tg-ws-proxy enable"),
        "{postinst}"
    );
    let sc = need("shellcheck", "shellcheck");
    ok(Command::new(&sc)
        .args(["-s", "sh"])
        .arg(c.join("postinst"))
        .arg(c.join("prerm")));
    assert_eq!(mode(&d.join("usr/bin/tg-ws-proxy")), 0o755);
    assert_eq!(mode(&d.join("etc/init.d/tg-ws-proxy")), 0o755);
    assert_eq!(mode(&d.join("etc/config/tg-ws-proxy")), 0o644);

    // SHA256SUMS covers the three artifacts and verifies.
    let sums = fs::read_to_string(p.out.join("SHA256SUMS")).unwrap();
    let mut listed: Vec<&str> = sums
        .lines()
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    listed.sort();
    let mut want = vec![
        format!("tg-ws-proxy-{VERSION}-{TARGET}"),
        tarball_name(),
        ipk_name(),
    ];
    want.sort();
    assert_eq!(listed, want, "SHA256SUMS:\n{sums}");
    ok(Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(&p.out));

    // Byte-reproducible: a second run with the same epoch gives the same bytes.
    let again = Scratch::new("again");
    package_into(&again.0);
    assert_eq!(
        fs::read_to_string(again.0.join("SHA256SUMS")).unwrap(),
        sums,
        "two runs of cross/dist.sh package differ"
    );
}

#[test]
fn install_sh_under_busybox_in_a_temp_root() {
    let p = pkg();
    let t = Scratch::new("openwrt");
    let root = openwrt_root(&t.0);
    let path = applet_path(&t.0);
    let log = install_ok(&p.dir, &root, &path, &[]);

    let bin = root.join("usr/bin/tg-ws-proxy");
    assert_installed_exec(&bin, &p.dir.join("tg-ws-proxy"));
    let init = root.join("etc/init.d/tg-ws-proxy");
    assert_installed_exec(&init, &p.dir.join("tg-ws-proxy.init"));
    let conf = root.join("etc/config/tg-ws-proxy");
    assert_eq!(
        fs::read(&conf).unwrap(),
        fs::read(p.dir.join("tg-ws-proxy.config")).unwrap()
    );
    assert!(
        !root.join("etc/config/tg-ws-proxy-opkg").exists(),
        "no -opkg file on a fresh install"
    );
    assert_eq!(mode(&root.join("etc/tg-ws-proxy")), 0o700);
    let secret_file = root.join("etc/tg-ws-proxy/secret");
    assert_eq!(mode(&secret_file), 0o600);
    let secret = secret_in(&secret_file);
    assert!(log.contains("skipped enabling and starting"), "{log}");
    // The link: the LAN address from /etc/config/network, the UCI port, the new secret.
    let link = log
        .lines()
        .find(|l| l.starts_with("tg://proxy?"))
        .unwrap_or_else(|| panic!("no tg:// link printed:\n{log}"));
    assert!(
        link.starts_with("tg://proxy?server=192.168.1.1&port=1443&secret="),
        "{link}"
    );
    assert!(
        link.ends_with(&secret),
        "the link does not carry the secret file's secret: {link}"
    );
    assert!(
        log.contains("https://t.me/proxy?server=192.168.1.1"),
        "{log}"
    );

    // A second run over the same install keeps the secret and says so.
    let log2 = install_ok(&p.dir, &root, &path, &[]);
    assert_eq!(
        secret_in(&secret_file),
        secret,
        "reinstall changed the secret"
    );
    assert!(log2.contains("kept /etc/tg-ws-proxy/secret"), "{log2}");
}

#[test]
fn upgrade_keeps_the_users_config() {
    let p = pkg();
    let t = Scratch::new("upgrade");
    let root = openwrt_root(&t.0);
    let path = applet_path(&t.0);
    install_ok(&p.dir, &root, &path, &[]);
    let conf = root.join("etc/config/tg-ws-proxy");
    let edited = fs::read_to_string(&conf).unwrap() + "\toption port '8443'\n";
    fs::write(&conf, &edited).unwrap();
    let secret = secret_in(&root.join("etc/tg-ws-proxy/secret"));

    // A "newer" tarball: another binary (trailing bytes change no ELF) and a new default config.
    let newer = t.0.join("newer");
    ok(Command::new("cp").arg("-a").arg(&p.dir).arg(&newer));
    let mut b = fs::read(newer.join("tg-ws-proxy")).unwrap();
    b.extend_from_slice(b"\nnewer build\n");
    fs::write(newer.join("tg-ws-proxy"), &b).unwrap();
    let new_default =
        fs::read_to_string(newer.join("tg-ws-proxy.config")).unwrap() + "# newer default\n";
    fs::write(newer.join("tg-ws-proxy.config"), &new_default).unwrap();

    let log = install_ok(&newer, &root, &path, &[]);
    assert_eq!(
        fs::read_to_string(&conf).unwrap(),
        edited,
        "the upgrade changed the user's config"
    );
    assert_eq!(
        fs::read(root.join("usr/bin/tg-ws-proxy")).unwrap(),
        b,
        "binary not replaced"
    );
    assert_eq!(
        fs::read_to_string(root.join("etc/config/tg-ws-proxy-opkg")).unwrap(),
        new_default,
        "the new default is not beside the config"
    );
    assert!(
        log.contains("kept your /etc/config/tg-ws-proxy") && log.contains("tg-ws-proxy-opkg"),
        "{log}"
    );
    assert_eq!(
        secret_in(&root.join("etc/tg-ws-proxy/secret")),
        secret,
        "the upgrade changed the secret"
    );
    assert!(
        log.contains("server=192.168.1.1&port=8443&"),
        "the link ignores the user's port:\n{log}"
    );
}

#[test]
fn an_old_plain_text_secret_moves_to_the_secret_file() {
    let p = pkg();
    let t = Scratch::new("migrate");
    let root = openwrt_root(&t.0);
    let path = applet_path(&t.0);
    let conf = root.join("etc/config/tg-ws-proxy");
    fs::write(
        &conf,
        "config proxy 'main'\n\toption enabled '1'\n\toption secret '0123456789abcdef0123456789abcdef'\n",
    )
    .unwrap();
    let log = install_ok(&p.dir, &root, &path, &[]);
    assert_eq!(
        secret_in(&root.join("etc/tg-ws-proxy/secret")),
        common::SECRET
    );
    assert_eq!(mode(&root.join("etc/tg-ws-proxy/secret")), 0o600);
    let after = fs::read_to_string(&conf).unwrap();
    assert!(
        !after.contains("secret '"),
        "the plain-text secret stayed in /etc/config: {after}"
    );
    assert!(
        after.contains("option enabled '1'"),
        "other options lost: {after}"
    );
    assert!(log.contains("moved the secret"), "{log}");
}

#[test]
fn a_tarball_for_another_cpu_is_refused() {
    let p = pkg();
    let t = Scratch::new("wrong-arch");
    let root = openwrt_root(&t.0);
    let path = applet_path(&t.0);

    // The tarball's binary says little-endian MIPS (e_machine 8) on this x86-64 machine.
    let other = t.0.join("other");
    ok(Command::new("cp").arg("-a").arg(&p.dir).arg(&other));
    let mut b = fs::read(other.join("tg-ws-proxy")).unwrap();
    assert_eq!(
        &b[..6],
        b"\x7fELF\x02\x01",
        "the host binary is not a 64-bit LSB ELF"
    );
    b[18] = 8;
    b[19] = 0;
    fs::write(other.join("tg-ws-proxy"), &b).unwrap();
    let out = install(&other, &root, &path, &[]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "installed a MIPS tarball on x86-64");
    assert!(
        err.contains(
            "this tarball is for little-endian MIPS32 (mipsel_24kc), but this machine is x86-64"
        ),
        "{err}"
    );
    assert!(
        !root.join("usr/bin/tg-ws-proxy").exists(),
        "the binary was installed anyway"
    );

    // uname -m says mips (UNAME_M: Debian's busybox sh always runs its own uname applet); the
    // byte order comes from the system's busybox, byte 5 of its ELF header.
    let on_mips = |root: &Path| {
        run(Command::new(busybox())
            .arg("sh")
            .arg(p.dir.join("install.sh"))
            .env_clear()
            .env("PATH", &path)
            .env("ROOT", root)
            .env("UNAME_M", "mips"))
    };
    let out = on_mips(&root);
    let err = text(&out.stderr);
    assert!(
        !out.status.success(),
        "installed a x86-64 tarball on a MIPS router"
    );
    assert!(
        err.contains("this tarball is for x86-64, but this machine is little-endian MIPS32"),
        "{err}"
    );
    let mut bb = fs::read(root.join("bin/busybox")).unwrap();
    bb[5] = 2;
    fs::write(root.join("bin/busybox"), bb).unwrap();
    let out = on_mips(&root);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr)
            .contains("but this machine is big-endian MIPS32 (mips_24kc) (uname -m: mips)"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        !root.join("usr/bin/tg-ws-proxy").exists(),
        "the binary was installed anyway"
    );
}

/// ROOT=DIR for another CPU (building an image): the binary cannot run here, so the secret
/// comes from /dev/urandom and the link is left for the router.
#[test]
fn a_root_for_another_cpu_gets_a_secret_without_running_the_binary() {
    let p = pkg();
    let t = Scratch::new("image");
    let root = openwrt_root(&t.0);
    let path = applet_path(&t.0);
    // A little-endian MIPS tarball (patched e_machine) for a root whose busybox is
    // little-endian, with UNAME_M=mips: the CPUs match, but the binary does not run here.
    let other = t.0.join("mipsel");
    ok(Command::new("cp").arg("-a").arg(&p.dir).arg(&other));
    // Only the ELF header install.sh reads (e_machine patched to MIPS), then a shell line: a
    // file the kernel refuses (ENOEXEC), which sh would run as a script if it were started.
    let mut b = fs::read(other.join("tg-ws-proxy")).unwrap();
    b.truncate(20);
    b[18] = 8;
    b[19] = 0;
    b.extend_from_slice(b"\n: >ran-as-script\n");
    fs::write(other.join("tg-ws-proxy"), &b).unwrap();
    // Found in review of issue 11: started anyway, its execve failed with ENOEXEC and busybox
    // sh then read the ELF file as a shell script, whose bytes' redirections made empty junk
    // files in the current directory (one was committed once). install.sh now never starts a
    // binary for another CPU: run from an empty directory and check it stays empty.
    let cwd = t.0.join("cwd");
    fs::create_dir_all(&cwd).unwrap();
    let out = run(Command::new(busybox())
        .current_dir(&cwd)
        .arg("sh")
        .arg(other.join("install.sh"))
        .env_clear()
        .env("PATH", &path)
        .env("ROOT", &root)
        .env("UNAME_M", "mips"));
    let log = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("CPU: little-endian MIPS32 (mipsel_24kc), matches"),
        "{log}"
    );
    assert_eq!(fs::read(root.join("usr/bin/tg-ws-proxy")).unwrap(), b);
    let secret_file = root.join("etc/tg-ws-proxy/secret");
    assert_eq!(mode(&secret_file), 0o600);
    secret_in(&secret_file);
    assert!(log.contains("from /dev/urandom"), "{log}");
    assert!(log.contains("could not print the link here"), "{log}");
    let junk: Vec<_> = fs::read_dir(&cwd)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(
        junk.is_empty(),
        "the foreign binary was run as a script: {junk:?}"
    );
}

/// Neither OpenWrt nor Entware nor systemd: generic Linux gets docs/setup.md's paths (no /opt,
/// the trap of issue 23), no service, and the command to run it by hand.
#[test]
fn a_plain_linux_gets_the_documented_paths_and_no_service() {
    let p = pkg();
    let t = Scratch::new("plain-linux");
    let root = t.0.join("root");
    fs::create_dir_all(root.join("etc")).unwrap();
    let path = applet_path(&t.0);
    let log = install_ok(&p.dir, &root, &path, &[]);
    assert_installed_exec(
        &root.join("usr/local/bin/tg-ws-proxy"),
        &p.dir.join("tg-ws-proxy"),
    );
    let conf = fs::read_to_string(root.join("etc/tg-ws-proxy.conf")).unwrap();
    assert!(
        conf.contains("\nsecret-file /etc/tg-ws-proxy.secret\n") && !conf.contains("/opt"),
        "{conf}"
    );
    assert_eq!(mode(&root.join("etc/tg-ws-proxy.secret")), 0o600);
    assert!(
        !root.join("opt").exists() && !root.join("etc/systemd").exists(),
        "wrote /opt or a unit"
    );
    assert!(!log.contains("/opt"), "{log}");
}
