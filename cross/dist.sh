#!/usr/bin/env bash
# cross/dist.sh — the router release artifacts of tg-ws-proxy (`make dist`). Owns: the names
# and layout of everything in dist/ (stripped binary, .ipk, .tar.gz, SHA256SUMS), the .ipk's
# control files (control, conffiles, postinst, prerm) and the OpenWrt arch name per target.
# Must not touch: how binaries are built (cross/build.sh) or the files it packages
# (cross/install.sh, cross/entware/*, cross/openwrt/tg-ws-proxy/files/*), which it copies as
# they are. Byte-reproducible: GNU tar with owner 0:0, sorted names and a fixed mtime, gzip -n.
#
# Usage: cross/dist.sh COMMAND [ARGS]
#   package TARGET BINARY OUTDIR   from an already built static BINARY for TARGET, write into
#                                  OUTDIR: tg-ws-proxy-VERSION-TARGET (stripped),
#                                  tg-ws-proxy_VERSION_ARCH.ipk, tg-ws-proxy-VERSION-TARGET.tar.gz,
#                                  then rewrite OUTDIR/SHA256SUMS. No cross toolchain needed.
#   all [TARGET...]                `make dist`: cross/build.sh build + smoke for each TARGET
#                                  (default: the six router targets), empty $DIST_DIR of older
#                                  artifacts, package each into it, SHA256SUMS over it
#   apk TARGET OUTDIR              from OUTDIR/tg-ws-proxy-VERSION-TARGET (made by `package`),
#                                  write OUTDIR/tg-ws-proxy_VERSION-r1_ARCH.apk, the apk v3
#                                  package of OpenWrt 25.x, with `apk mkpkg` (apk-tools 3: not in
#                                  Debian; the release workflow runs it in an Alpine container),
#                                  then rewrite SHA256SUMS
#   installer OUTDIR [BASE]        copy cross/install.sh to OUTDIR/install.sh with its download
#                                  address (RELEASE_BASE) set to BASE, then rewrite SHA256SUMS
#   sums OUTDIR                    rewrite OUTDIR/SHA256SUMS (sha256sum format) over the artifacts
#   arch TARGET                    print the OpenWrt arch name used for TARGET's .ipk
#
# Environment (all optional):
#   DIST_DIR           output of `all` (default: dist/ in the repository, gitignored)
#   SOURCE_DATE_EPOCH  mtime of every archive member (default: the last commit's time, else 0)
#   STRIP              strip program (default: TARGET-strip, else llvm-strip, else none: the
#                      release profile's `strip = true` already stripped the binary)
#   CROSS_TARGET_DIR   where cross/build.sh leaves binaries (default /var/tmp/tg-ws-proxy-cross)
set -euo pipefail

BIN=tg-ws-proxy
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CROSS_TARGET_DIR="${CROSS_TARGET_DIR:-/var/tmp/tg-ws-proxy-cross}"
DIST_DIR="${DIST_DIR:-$REPO_ROOT/dist}"
ALL_TARGETS="mips-unknown-linux-musl mipsel-unknown-linux-musl armv7-unknown-linux-musleabihf arm-unknown-linux-musleabi aarch64-unknown-linux-musl x86_64-unknown-linux-musl"

log() { printf '[dist] %s\n' "$*" >&2; }
die() {
    printf '[dist] ERROR: %s\n' "$*" >&2
    exit 1
}

# The package version: Cargo.toml's [package] version.
version() {
    local v
    v="$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' "$REPO_ROOT/Cargo.toml" | sed -n 1p)"
    [ -n "$v" ] || die "no version in $REPO_ROOT/Cargo.toml"
    echo "$v"
}

# OpenWrt's arch name (opkg's Architecture field) per target. A static binary runs on every CPU
# of the family; a router whose opkg reports another name of the same family installs the ipk
# with `opkg install --force-arch` or uses the tarball's install.sh (cross/README.md).
openwrt_arch() {
    case "$1" in
    mips-unknown-linux-musl) echo mips_24kc ;;
    mipsel-unknown-linux-musl) echo mipsel_24kc ;;
    armv7-unknown-linux-musleabihf) echo arm_cortex-a7_neon-vfpv4 ;;
    # ARMv6 and later without an FPU (bcm53xx's Cortex-A9 has none): the soft-float build.
    arm-unknown-linux-musleabi) echo arm_cortex-a9 ;;
    aarch64-unknown-linux-musl) echo aarch64_cortex-a53 ;;
    x86_64-unknown-linux-musl) echo x86_64 ;;
    *) die "unknown target '$1' (one of: $ALL_TARGETS)" ;;
    esac
}

epoch() {
    if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
        echo "$SOURCE_DATE_EPOCH"
    else
        git -C "$REPO_ROOT" log -1 --format=%ct 2>/dev/null || echo 0
    fi
}

# det_tar OUT.tar.gz DIR MEMBER...: a gzipped tar of MEMBERs (relative to DIR) whose bytes
# depend only on the members' contents and modes.
det_tar() {
    local out=$1 dir=$2
    shift 2
    tar -C "$dir" --format=gnu --sort=name --owner=0 --group=0 --numeric-owner \
        --mtime="@$EPOCH" -cf - "$@" | gzip -n -9 >"$out"
}

# strip_into SRC DEST TARGET: copy SRC to DEST, stripped; says which strip was used.
strip_into() {
    local src=$1 dest=$2 t=$3 s=""
    if [ -n "${STRIP:-}" ]; then
        s=$STRIP
    elif command -v "${t%%-*}-linux-musl-strip" >/dev/null 2>&1; then
        s="${t%%-*}-linux-musl-strip"
    elif command -v llvm-strip >/dev/null 2>&1; then
        s=llvm-strip
    fi
    if [ -n "$s" ]; then
        "$s" -o "$dest" "$src" || die "$s failed on $src"
        log "stripped with $s: $(stat -c %s "$src") -> $(stat -c %s "$dest") B"
    else
        cp "$src" "$dest"
        log "no strip program (STRIP, ${t%%-*}-linux-musl-strip, llvm-strip): kept the release" \
            "profile's already stripped file ($(stat -c %s "$dest") B)"
    fi
    chmod 755 "$dest"
}

# The .ipk's control files. No Depends field: the binary is static and needs nothing, not
# even the system's libc. postinst/prerm do nothing to the running system while an image
# is being built (IPKG_INSTROOT set), as OpenWrt's own packages do.
write_control() {
    local dir=$1 arch=$2 size=$3
    cat >"$dir/control" <<EOF
Package: $BIN
Version: $VERSION
Section: net
Architecture: $arch
Installed-Size: $size
Maintainer: tg-ws-proxy developers
Description: MTProto proxy for the LAN: Telegram over WebSocket/TLS with fallback tiers.
 One static binary, one thread, fixed memory. Configure with uci (/etc/config/$BIN);
 the secret lives in /etc/tg-ws-proxy/secret (0600). Links: /etc/init.d/$BIN link
EOF
    printf '/etc/config/%s\n' "$BIN" >"$dir/conffiles"
    cat >"$dir/postinst" <<'EOF'
#!/bin/sh
# postinst of tg-ws-proxy (cross/dist.sh): create the 0600 secret file if none, enable, start.
[ -n "${IPKG_INSTROOT:-}" ] && exit 0
d=/etc/tg-ws-proxy
f=$d/secret
if [ ! -s "$f" ]; then
	(umask 077 && mkdir -p "$d" && /usr/bin/tg-ws-proxy genkey >"$f.tmp" && mv -f "$f.tmp" "$f") ||
		{ echo "tg-ws-proxy: could not create $f" >&2; exit 1; }
	echo "tg-ws-proxy: created the secret file $f (mode 0600)"
fi
u="$(uci -q get tg-ws-proxy.main.user 2>/dev/null || echo nobody)"
[ -n "$u" ] || u=nobody
chown -R "$u" "$d" 2>/dev/null || echo "tg-ws-proxy: note: could not chown $d to '$u'" >&2
chmod 700 "$d"
chmod 600 "$f"
/etc/init.d/tg-ws-proxy enable
/etc/init.d/tg-ws-proxy restart
echo "tg-ws-proxy: started; the links: /etc/init.d/tg-ws-proxy link"
exit 0
EOF
    cat >"$dir/prerm" <<'EOF'
#!/bin/sh
# prerm of tg-ws-proxy (cross/dist.sh): stop and disable the service; config and secret stay.
[ -n "${IPKG_INSTROOT:-}" ] && exit 0
/etc/init.d/tg-ws-proxy stop 2>/dev/null
/etc/init.d/tg-ws-proxy disable 2>/dev/null
exit 0
EOF
    chmod 644 "$dir/control" "$dir/conffiles"
    chmod 755 "$dir/postinst" "$dir/prerm"
}

# The tarball's README.txt.
write_readme() {
    local f=$1 t=$2
    cat >"$f" <<EOF
tg-ws-proxy $VERSION for $t (static musl binary)

Install on the router (OpenWrt with opkg or apk, or Entware on Keenetic), as root:

    cd /tmp && tar xzf $BIN-$VERSION-$t.tar.gz && sh $BIN-$VERSION-$t/install.sh

install.sh checks that this CPU matches the router, installs the binary, the init script and
the config (an existing config is kept; the new default is written beside it), creates the
secret file (0600) if there is none, enables and starts the service and prints the tg:// link.
Options: --no-start, --uninstall (keeps config and secret), --uninstall --purge.

Files:
  tg-ws-proxy               the binary           -> /usr/bin (OpenWrt), /opt/sbin (Entware)
  tg-ws-proxy.init          procd init script    -> /etc/init.d/tg-ws-proxy
  tg-ws-proxy.config        UCI config           -> /etc/config/tg-ws-proxy
  S99tg-ws-proxy            Entware init script  -> /opt/etc/init.d/S99tg-ws-proxy
  tg-ws-proxy.conf.example  config file (--config) for systems without UCI
                                                 -> /opt/etc/tg-ws-proxy.conf (Entware)
  install.sh                the installer (busybox sh)

More: cross/README.md and README.md in the source repository.
EOF
    chmod 644 "$f"
}

cmd_sums() {
    local out=$1
    [ -d "$out" ] || die "no directory $out"
    (
        cd "$out"
        local files=()
        for f in "$BIN"-* "$BIN"_*.ipk "$BIN"_*.apk install.sh; do
            [ -f "$f" ] && files+=("$f")
        done
        [ ${#files[@]} -gt 0 ] || die "no artifacts in $out"
        sha256sum "${files[@]}" >SHA256SUMS.tmp
        mv -f SHA256SUMS.tmp SHA256SUMS
    )
    log "wrote $out/SHA256SUMS ($(wc -l <"$out/SHA256SUMS") files)"
}

cmd_package() {
    [ $# -eq 3 ] || die "usage: cross/dist.sh package TARGET BINARY OUTDIR"
    local t=$1 bin=$2 out=$3 arch stage name size
    [ -f "$bin" ] || die "no binary $bin (build it first: cross/build.sh build $t)"
    arch="$(openwrt_arch "$t")"
    local init="$REPO_ROOT/cross/openwrt/tg-ws-proxy/files/tg-ws-proxy.init"
    local uci="$REPO_ROOT/cross/openwrt/tg-ws-proxy/files/tg-ws-proxy.config"
    local s99="$REPO_ROOT/cross/entware/S99tg-ws-proxy"
    local conf="$REPO_ROOT/cross/entware/tg-ws-proxy.conf"
    local inst="$REPO_ROOT/cross/install.sh"
    local f
    for f in "$init" "$uci" "$s99" "$conf" "$inst"; do
        [ -f "$f" ] || die "missing $f"
    done
    mkdir -p "$out"
    out="$(cd "$out" && pwd)"
    stage="$(mktemp -d)"
    # shellcheck disable=SC2064 # expand now: $stage is local
    trap "rm -rf '$stage'" EXIT

    name="$BIN-$VERSION-$t"
    strip_into "$bin" "$out/$name" "$t"

    # .tar.gz: one top directory, the contract's seven files.
    mkdir -p "$stage/tgz/$name"
    cp "$out/$name" "$stage/tgz/$name/$BIN"
    cp "$inst" "$stage/tgz/$name/install.sh"
    cp "$init" "$stage/tgz/$name/$BIN.init"
    cp "$uci" "$stage/tgz/$name/$BIN.config"
    cp "$s99" "$stage/tgz/$name/S99$BIN"
    cp "$conf" "$stage/tgz/$name/$BIN.conf.example"
    write_readme "$stage/tgz/$name/README.txt" "$t"
    chmod 755 "$stage/tgz/$name" "$stage/tgz/$name/$BIN" "$stage/tgz/$name/install.sh" \
        "$stage/tgz/$name/$BIN.init" "$stage/tgz/$name/S99$BIN"
    chmod 644 "$stage/tgz/$name/$BIN.config" "$stage/tgz/$name/$BIN.conf.example"
    det_tar "$out/$name.tar.gz" "$stage/tgz" "$name"

    # .ipk: what OpenWrt's ipkg-build makes: a gzipped tar of ./debian-binary, ./data.tar.gz
    # and ./control.tar.gz (opkg reads this as well as the Debian ar form).
    mkdir -p "$stage/ipk/data/usr/bin" "$stage/ipk/data/etc/init.d" \
        "$stage/ipk/data/etc/config" "$stage/ipk/control" "$stage/ipk/outer"
    cp "$out/$name" "$stage/ipk/data/usr/bin/$BIN"
    cp "$init" "$stage/ipk/data/etc/init.d/$BIN"
    cp "$uci" "$stage/ipk/data/etc/config/$BIN"
    find "$stage/ipk/data" -type d -exec chmod 755 {} +
    chmod 755 "$stage/ipk/data/usr/bin/$BIN" "$stage/ipk/data/etc/init.d/$BIN"
    chmod 644 "$stage/ipk/data/etc/config/$BIN"
    size="$(find "$stage/ipk/data" -type f -exec stat -c %s {} + | awk '{s += $1} END {print s}')"
    write_control "$stage/ipk/control" "$arch" "$size"
    chmod 755 "$stage/ipk/control"
    printf '2.0\n' >"$stage/ipk/outer/debian-binary"
    chmod 644 "$stage/ipk/outer/debian-binary"
    det_tar "$stage/ipk/outer/control.tar.gz" "$stage/ipk/control" .
    det_tar "$stage/ipk/outer/data.tar.gz" "$stage/ipk/data" .
    chmod 644 "$stage/ipk/outer/control.tar.gz" "$stage/ipk/outer/data.tar.gz"
    # Member order as ipkg-build writes it (no --sort here: the order is part of the format).
    tar -C "$stage/ipk/outer" --format=gnu --owner=0 --group=0 --numeric-owner \
        --mtime="@$EPOCH" -cf - ./debian-binary ./data.tar.gz ./control.tar.gz |
        gzip -n -9 >"$out/${BIN}_${VERSION}_$arch.ipk"

    rm -rf "$stage"
    trap - EXIT
    printf '%s\n' "$out/$name" "$out/${BIN}_${VERSION}_$arch.ipk" "$out/$name.tar.gz"
    cmd_sums "$out"
}

# apk TARGET OUTDIR: the apk v3 package (OpenWrt 25.x) of the binary `package` left in OUTDIR:
# the same files and the same install scripts as the .ipk. Needs apk-tools 3 (`apk mkpkg`).
cmd_apk() {
    [ $# -eq 2 ] || die "usage: cross/dist.sh apk TARGET OUTDIR"
    local t=$1 out=$2 arch stage name
    arch="$(openwrt_arch "$t")"
    name="$BIN-$VERSION-$t"
    [ -f "$out/$name" ] || die "no $out/$name: run cross/dist.sh package $t BINARY $out first"
    if ! command -v apk >/dev/null 2>&1 || ! apk mkpkg --help >/dev/null 2>&1; then
        die "apk mkpkg not found: the apk v3 package needs apk-tools 3 (Alpine 3.23+ or OpenWrt's host apk; not in Debian)"
    fi
    out="$(cd "$out" && pwd)"
    stage="$(mktemp -d)"
    # shellcheck disable=SC2064 # expand now: $stage is local
    trap "rm -rf '$stage'" EXIT
    mkdir -p "$stage/data/usr/bin" "$stage/data/etc/init.d" "$stage/data/etc/config" "$stage/ctl"
    cp "$out/$name" "$stage/data/usr/bin/$BIN"
    cp "$REPO_ROOT/cross/openwrt/tg-ws-proxy/files/tg-ws-proxy.init" "$stage/data/etc/init.d/$BIN"
    cp "$REPO_ROOT/cross/openwrt/tg-ws-proxy/files/tg-ws-proxy.config" "$stage/data/etc/config/$BIN"
    find "$stage/data" -type d -exec chmod 755 {} +
    chmod 755 "$stage/data/usr/bin/$BIN" "$stage/data/etc/init.d/$BIN"
    chmod 644 "$stage/data/etc/config/$BIN"
    write_control "$stage/ctl" "$arch" 0
    find "$stage/data" -exec touch -h -d "@$EPOCH" {} +
    apk mkpkg \
        --info "name:$BIN" \
        --info "version:$VERSION-r1" \
        --info "description:MTProto proxy for the LAN: Telegram over WebSocket/TLS with fallback tiers" \
        --info "arch:$arch" \
        --info "license:MIT" \
        --info "origin:$BIN" \
        --info "maintainer:tg-ws-proxy developers" \
        --script "post-install:$stage/ctl/postinst" \
        --script "pre-deinstall:$stage/ctl/prerm" \
        --files "$stage/data" \
        --output "$out/${BIN}_$VERSION-r1_$arch.apk" ||
        die "apk mkpkg failed for $t"
    rm -rf "$stage"
    trap - EXIT
    printf '%s\n' "$out/${BIN}_$VERSION-r1_$arch.apk"
    cmd_sums "$out"
}

# installer OUTDIR [BASE]: the install.sh a release publishes on its own, whose default download
# address is BASE (the release's; empty: the source tree's install.sh as it is).
cmd_installer() {
    if [ $# -lt 1 ] || [ $# -gt 2 ]; then die "usage: cross/dist.sh installer OUTDIR [BASE]"; fi
    local out=$1 base=${2:-}
    case "$base" in *[\'\"\\\$\`\|]*) die "BASE must not hold quotes, \\, \$, \` or |: $base" ;; esac
    mkdir -p "$out"
    grep -q '^RELEASE_BASE=""$' "$REPO_ROOT/cross/install.sh" ||
        die "cross/install.sh has no RELEASE_BASE=\"\" line to set"
    sed "s|^RELEASE_BASE=\"\"\$|RELEASE_BASE=\"$base\"|" "$REPO_ROOT/cross/install.sh" >"$out/install.sh"
    chmod 755 "$out/install.sh"
    cmd_sums "$out"
}

cmd_all() {
    local targets=("$@") t
    if [ ${#targets[@]} -eq 0 ]; then
        # shellcheck disable=SC2206 # word splitting of the target list is intended
        targets=($ALL_TARGETS)
    fi
    for t in "${targets[@]}"; do
        openwrt_arch "$t" >/dev/null
    done
    "$REPO_ROOT/cross/build.sh" build "${targets[@]}"
    "$REPO_ROOT/cross/build.sh" smoke "${targets[@]}"
    # dist/ holds exactly one run: no artifact of an older version or target set stays listed.
    mkdir -p "$DIST_DIR"
    rm -f "$DIST_DIR/$BIN"-* "$DIST_DIR/$BIN"_*.ipk "$DIST_DIR/$BIN"_*.apk "$DIST_DIR/install.sh" \
        "$DIST_DIR/SHA256SUMS"
    for t in "${targets[@]}"; do
        cmd_package "$t" "$CROSS_TARGET_DIR/$t/release/$BIN" "$DIST_DIR" >/dev/null
    done
    (cd "$DIST_DIR" && sha256sum -c --quiet SHA256SUMS) || die "SHA256SUMS does not verify"
    printf '\n%s\n' "dist/ ($DIST_DIR), SOURCE_DATE_EPOCH=$EPOCH:"
    (cd "$DIST_DIR" && for f in "$BIN"-* "$BIN"_*.ipk "$BIN"_*.apk SHA256SUMS; do
        [ -f "$f" ] && printf '  %10s B  %s\n' "$(stat -c %s "$f")" "$f"
    done)
}

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

VERSION="$(version)"
EPOCH="$(epoch)"

main() {
    local cmd="${1:-}"
    [ $# -gt 0 ] && shift
    case "$cmd" in
    package) cmd_package "$@" ;;
    all) cmd_all "$@" ;;
    apk) cmd_apk "$@" ;;
    installer) cmd_installer "$@" ;;
    sums)
        [ $# -eq 1 ] || die "usage: cross/dist.sh sums OUTDIR"
        cmd_sums "$1"
        ;;
    arch)
        [ $# -eq 1 ] || die "usage: cross/dist.sh arch TARGET"
        openwrt_arch "$1"
        ;;
    -h | --help | help | "") usage ;;
    *)
        usage >&2
        exit 2
        ;;
    esac
}

main "$@"
