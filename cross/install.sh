#!/bin/sh
# install.sh — installs tg-ws-proxy on a router or a Linux box: OpenWrt (opkg or apk), Entware
# (Keenetic) or generic Linux (systemd or none). Two ways in: run from an unpacked `make dist`
# tarball (the binary next to it), or on its own, when it downloads the tarball for this CPU
# from a release (--base URL, a mirror or a local directory) and checks its sha256 against the
# release's SHA256SUMS. Owns: detecting the system and the CPU (soft or hard float on ARM),
# the download and its checksum, refusing a tarball built for another CPU or a filesystem
# without room, where each file goes, keeping an existing config on upgrade, creating the 0600
# secret file, enabling/starting the service and checking that it runs, keeping the previous
# binary and rolling back to it when the new one does not start, printing the link; and
# --uninstall. Must not touch: anything outside the files it lists below; the contents of an
# existing config (except moving an old plain-text `option secret` into the secret file).
# busybox sh, `set -eu`, no bashisms (shellcheck -s sh clean).
#
# Usage: sh install.sh [--base URL|DIR] [--target TARGET] [--no-start] [--uninstall [--purge]]
#   (no option)   install or upgrade, enable and start (restart on upgrade), check that the
#                 service runs (else roll back to the previous binary), print the link
#   --base B      download from B: a release's download address (https://…/releases/download/
#                 vX.Y.Z), a mirror of it, file://DIR or a local directory holding SHA256SUMS
#                 and the tarballs. The default, when no binary lies next to install.sh: the
#                 release this install.sh was published with (RELEASE_BASE below)
#   --target T    the Rust target to download (default: detected, e.g. mipsel-unknown-linux-musl)
#   --no-start    install but do not enable or start
#   --uninstall   stop, disable, remove the binary (and the kept previous one) and the init
#                 script; config and secret stay
#   --purge       with --uninstall: remove the config and the secret file too
# Environment:
#   TG_BASE=B     the same as --base B
#   ROOT=DIR      install under DIR instead of / (tests, image building): nothing is started
#                 (unless SERVICE_CMD is set) and no owner is changed; the system and CPU are
#                 read from DIR/etc and DIR/bin
#   UNAME_M=NAME  the machine to assume instead of `uname -m` (building an image for another
#                 CPU under ROOT; tests, since Debian's busybox sh always runs its own uname)
#   CPUINFO=FILE  read the ARM FPU features from FILE instead of /proc/cpuinfo
#   START_WAIT=S  seconds to wait for the service to run after a (re)start (default 20);
#   START_SETTLE=S  then seconds it must keep the same process (default 3)
#   DF=PROG       the df to ask for free space (tests: busybox sh runs its own applets first)
#   SERVICE_CMD=PROG  control the service with `PROG start|stop|restart|enable|disable|pids`
#                 instead of the init script (tests: a stand-in for procd under ROOT)
#
# Files: OpenWrt /usr/bin/tg-ws-proxy, /etc/init.d/tg-ws-proxy (procd), /etc/config/tg-ws-proxy
# (UCI; on upgrade the new default goes to /etc/config/tg-ws-proxy-opkg, with apk
# tg-ws-proxy.apk-new), /etc/tg-ws-proxy/secret.
# Entware /opt/sbin/tg-ws-proxy, /opt/etc/init.d/S99tg-ws-proxy, /opt/etc/tg-ws-proxy.conf (new
# default: /opt/etc/tg-ws-proxy.conf.new), /opt/etc/tg-ws-proxy/secret.
# Generic Linux (docs/setup.md "By hand"): /usr/local/bin/tg-ws-proxy, /etc/tg-ws-proxy.conf,
# /etc/tg-ws-proxy.secret, with systemd /etc/systemd/system/tg-ws-proxy.service.
# Every system: the previous binary stays as BINARY.old after an upgrade.
set -eu

NAME=tg-ws-proxy
# The release this copy belongs to: .github/workflows/release.yml writes the tag's download
# address here in the install.sh it publishes; empty in the source tree.
RELEASE_BASE=""
HERE="$(cd "$(dirname "$0")" && pwd)"

say() { echo "$NAME install: $*"; }
die() {
	echo "$NAME install: ERROR: $*" >&2
	exit 1
}

NO_START=0
UNINSTALL=0
PURGE=0
BASE="${TG_BASE:-}"
TARGET=""
while [ "$#" -gt 0 ]; do
	a="$1"
	shift
	case "$a" in
	--no-start) NO_START=1 ;;
	--uninstall) UNINSTALL=1 ;;
	--purge) PURGE=1 ;;
	--base | --target)
		if [ "$#" -eq 0 ] || [ -z "$1" ]; then die "$a needs a value"; fi
		if [ "$a" = --base ]; then BASE="$1"; else TARGET="$1"; fi
		shift
		;;
	--base=*) BASE="${a#--base=}" ;;
	--target=*) TARGET="${a#--target=}" ;;
	-h | --help)
		sed -n '2,/^set -eu/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
		exit 0
		;;
	*) die "unknown option '$a' (options: --base, --target, --no-start, --uninstall, --purge, --help)" ;;
	esac
done
[ "$PURGE" -eq 0 ] || [ "$UNINSTALL" -eq 1 ] || die "--purge goes with --uninstall"
START_WAIT="${START_WAIT:-20}"
START_SETTLE="${START_SETTLE:-3}"
SERVICE_CMD="${SERVICE_CMD:-}"

ROOT="${ROOT:-/}"
R="${ROOT%/}" # "" for /, so "$R/etc" is /etc
if [ -n "$R" ]; then
	[ -d "$R" ] || die "ROOT=$ROOT is not a directory"
	R="$(cd "$R" && pwd)"
elif [ "$(id -u)" -ne 0 ]; then
	die "run as root (or set ROOT=DIR to install under DIR)"
fi

# --- the system ------------------------------------------------------------------------------

SECRET_DIR=""
if [ -f "$R/etc/openwrt_release" ]; then
	if [ -x "$R/bin/opkg" ] || [ -x "$R/usr/bin/opkg" ]; then
		SYS=openwrt PM=opkg
	elif [ -x "$R/usr/bin/apk" ] || [ -x "$R/sbin/apk" ] || [ -x "$R/bin/apk" ]; then
		SYS=openwrt PM=apk
	else
		SYS=openwrt PM=none
	fi
	BIN=/usr/bin/$NAME
	INIT=/etc/init.d/$NAME
	INIT_SRC=$NAME.init
	CONF=/etc/config/$NAME
	CONF_SRC=$NAME.config
	CONF_NEW=$CONF-opkg
	[ "$PM" != apk ] || CONF_NEW=$CONF.apk-new # each package manager's own name for it
	SECRET_DIR=/etc/$NAME
	SECRET=$SECRET_DIR/secret
elif [ -x "$R/opt/bin/opkg" ] && [ -d "$R/opt/etc" ]; then
	SYS=entware PM=opkg
	BIN=/opt/sbin/$NAME
	INIT=/opt/etc/init.d/S99$NAME
	INIT_SRC=S99$NAME
	CONF=/opt/etc/$NAME.conf
	CONF_SRC=$NAME.conf.example
	CONF_NEW=$CONF.new
	SECRET_DIR=/opt/etc/$NAME
	SECRET=$SECRET_DIR/secret
elif [ "$(uname -s 2>/dev/null || echo Linux)" = Linux ]; then
	# Any other Linux: the paths of docs/setup.md ("By hand, on any Linux box"); a systemd
	# unit when systemd runs the machine, else no service (the command is printed).
	SYS=linux PM=none
	BIN=/usr/local/bin/$NAME
	INIT=""
	INIT_SRC=""
	if [ -d "$R/run/systemd/system" ] || [ -d "$R/etc/systemd/system" ]; then
		INIT=/etc/systemd/system/$NAME.service
	fi
	CONF=/etc/$NAME.conf
	CONF_SRC="" # written by linux_conf below: the tarball's example has Entware's /opt paths
	CONF_NEW=$CONF.new
	SECRET=/etc/$NAME.secret
else
	die "this is not Linux ($(uname -s)): install.sh supports OpenWrt, Entware and Linux"
fi
say "system: $SYS (package manager: $PM)${R:+, under ROOT=$R}"

# --- the CPU ---------------------------------------------------------------------------------

# elf_bytes FILE: the first 40 bytes of FILE as lowercase hex, one space between (fewer for a
# shorter file).
elf_bytes() {
	if command -v hexdump >/dev/null 2>&1; then
		hexdump -n 40 -v -e '40/1 "%02x " "\n"' "$1"
	elif command -v od >/dev/null 2>&1; then
		od -A n -v -t x1 -N 40 "$1" | tr -s ' \n' '  '
	else
		die "neither hexdump nor od found: cannot read $1's ELF header"
	fi
}

# elf_cpu FILE: mips | mipsel | armv7 (hard float) | arm (soft float) | aarch64 | x86_64 |
# other:MACHINE | not-elf, from the ELF header (byte 5: 1 little-endian, 2 big-endian; bytes
# 18-19: e_machine in that byte order; for 32-bit ARM, e_flags at bytes 36-39: 0x400 hard
# float, 0x200 soft float).
elf_cpu() {
	# shellcheck disable=SC2046 # split the hex bytes into $1..$40 on purpose
	set -- $(elf_bytes "$1")
	if [ "$#" -lt 20 ] || [ "$1$2$3$4" != 7f454c46 ]; then
		echo "not-elf"
		return 0
	fi
	if [ "$6" = 02 ]; then m=${20}; else m=${19}; fi
	case "$m:$6" in
	08:02) echo mips ;;
	08:01) echo mipsel ;;
	28:*)
		# e_flags, little-endian: byte 37 holds bits 8-15 (0x04 hard, 0x02 soft).
		if [ "$#" -ge 38 ] && [ "$((0x${38} & 4))" -ne 0 ]; then echo armv7; else echo arm; fi
		;;
	b7:*) echo aarch64 ;;
	3e:*) echo x86_64 ;;
	*) echo "other:e_machine=0x$m" ;;
	esac
}

# The ARM FPU: "hard" when the CPU has VFPv3 or better (what the armv7 hard-float build
# needs), else "soft". /proc/cpuinfo's Features first; on OpenWrt without it, DISTRIB_ARCH.
arm_float() {
	f="${CPUINFO:-/proc/cpuinfo}"
	if [ -r "$f" ] && grep -q '^Features' "$f"; then
		if grep '^Features' "$f" | grep -q -w -e vfpv3 -e vfpv3d16 -e vfpv4 -e vfpd32; then
			echo hard
		else
			echo soft
		fi
		return 0
	fi
	case "$(openwrt_arch)" in
	*vfpv3* | *vfpv4* | *neon*) echo hard ;;
	arm_*) echo soft ;;
	*) echo hard ;; # an ARMv7 without a word about its FPU: nearly all have VFPv3
	esac
}

# DISTRIB_ARCH of /etc/openwrt_release, or nothing.
openwrt_arch() {
	sed -n "s/^DISTRIB_ARCH=['\"]\\{0,1\\}\\([^'\"]*\\).*/\\1/p" "$R/etc/openwrt_release" 2>/dev/null |
		sed -n 1p
}

# The machine's CPU, in elf_cpu's words: `uname -m`, for MIPS the byte order of the system's
# own busybox (`uname -m` says mips on both), for 32-bit ARM the FPU.
sys_cpu() {
	m="${UNAME_M:-$(uname -m)}"
	case "$m" in
	x86_64 | amd64) echo x86_64 ;;
	aarch64 | arm64 | armv8b | aarch64_be) echo aarch64 ;;
	armv7* | armv8*)
		if [ "$(arm_float)" = hard ]; then echo armv7; else echo arm; fi
		;;
	armv6*) echo arm ;;
	arm*) echo "armv5-or-older:$m" ;;
	mips*)
		for f in "$R/bin/busybox" "$R/bin/sh"; do
			if [ -f "$f" ]; then
				c="$(elf_cpu "$f")"
				case "$c" in mips | mipsel) echo "$c" && return 0 ;; esac
				# A busybox that is not MIPS on a MIPS uname: use its byte order anyway.
				case "$(elf_bytes "$f")" in
				"7f 45 4c 46 "??" 02 "*) echo mips && return 0 ;;
				"7f 45 4c 46 "??" 01 "*) echo mipsel && return 0 ;;
				esac
			fi
		done
		echo "mips-unknown-byte-order"
		;;
	*) echo "$m" ;;
	esac
}

# runs_here FILE: true unless FILE is an ELF binary for another CPU than the one running this
# script (read from /proc/self/exe, the reading tool's own binary). A foreign binary must not be
# started: its execve fails with ENOEXEC and sh then reads the ELF bytes as a script (empty junk
# files from their redirections). Without /proc the answer is "try it". An ARM soft-float
# binary runs on a hard-float ARM.
runs_here() {
	[ -r /proc/self/exe ] || return 0
	here="$(elf_cpu /proc/self/exe 2>/dev/null)" || return 0
	case "$here" in not-elf | '') return 0 ;; esac
	there="$(elf_cpu "$1")"
	[ "$there" = "$here" ] || { [ "$there" = arm ] && [ "$here" = armv7 ]; }
}

describe() {
	case "$1" in
	mips) echo "big-endian MIPS32 (mips_24kc)" ;;
	mipsel) echo "little-endian MIPS32 (mipsel_24kc)" ;;
	armv7) echo "ARMv7 with FPU (hard float)" ;;
	arm) echo "ARMv6+ without FPU (soft float)" ;;
	aarch64) echo "64-bit ARM" ;;
	x86_64) echo "x86-64" ;;
	armv5-or-older:*) echo "ARMv5 or older (${1#*:}; no build for it: the soft-float build needs ARMv6)" ;;
	*) echo "$1" ;;
	esac
}

# The Rust target of each CPU: the name in the release's file names.
target_of() {
	case "$1" in
	mips) echo mips-unknown-linux-musl ;;
	mipsel) echo mipsel-unknown-linux-musl ;;
	armv7) echo armv7-unknown-linux-musleabihf ;;
	arm) echo arm-unknown-linux-musleabi ;;
	aarch64) echo aarch64-unknown-linux-musl ;;
	x86_64) echo x86_64-unknown-linux-musl ;;
	*) return 1 ;;
	esac
}

# --- helpers ---------------------------------------------------------------------------------

# uci_opt NAME: the value of `option NAME` in the installed UCI config (quotes removed).
uci_opt() {
	sed -n "s/^[[:space:]]*option[[:space:]][[:space:]]*$1[[:space:]][[:space:]]*['\"]\\{0,1\\}\\([^'\"]*\\)['\"]\\{0,1\\}[[:space:]]*\$/\\1/p" \
		"$R$CONF" 2>/dev/null | sed -n '$p'
}

# conf_value NAME: the value of NAME in the installed config file (Entware, generic format).
conf_value() {
	sed -n "s/^[[:space:]]*$1[[:space:]=][[:space:]=]*\\(.*[^[:space:]]\\)[[:space:]]*\$/\\1/p" \
		"$R$CONF" 2>/dev/null | sed -n '$p'
}

# The LAN address from the UCI network config (first ipaddr of interface 'lan', no /prefix).
lan_ip() {
	awk '
		/^[[:space:]]*config[[:space:]]/ { lan = ($0 ~ /interface[[:space:]]+.?lan.?[[:space:]]*$/) }
		lan && /^[[:space:]]*(option|list)[[:space:]]+ipaddr[[:space:]]/ {
			v = $3; gsub(/["\047]/, "", v); sub(/\/.*/, "", v); print v; exit
		}' "$R/etc/config/network" 2>/dev/null || true
}

# put SRC DEST MODE: copy through a temporary file and rename, so a running binary or a
# reader never sees half a file.
put() {
	mkdir -p "$(dirname "$2")"
	cp "$1" "$2.tmp.$$"
	chmod "$3" "$2.tmp.$$"
	mv -f "$2.tmp.$$" "$2"
}

service_user() {
	u=""
	[ "$SYS" != openwrt ] || u="$(uci_opt user)"
	echo "${u:-nobody}"
}

# svc ACTION: start | stop | restart | enable | disable through the init script, systemctl or
# SERVICE_CMD. Nothing without a service (generic Linux without systemd).
svc() {
	if [ -n "$SERVICE_CMD" ]; then
		"$SERVICE_CMD" "$1"
	elif [ "$SYS" = linux ]; then
		[ -z "$INIT" ] || systemctl "$1" "$NAME"
	else
		case "$1" in
		enable | disable) [ "$SYS" != openwrt ] || "$INIT" "$1" ;;
		*) "$INIT" "$1" ;;
		esac
	fi
}

# svc_pids: the pid(s) of the running service, nothing when it does not run.
svc_pids() {
	if [ -n "$SERVICE_CMD" ]; then
		"$SERVICE_CMD" pids 2>/dev/null || true
	elif [ "$SYS" = linux ]; then
		p="$(systemctl show -p MainPID --value "$NAME" 2>/dev/null || true)"
		[ "${p:-0}" = 0 ] || echo "$p"
	elif command -v pidof >/dev/null 2>&1; then
		pidof "$NAME" 2>/dev/null || true
	else
		# No pidof: the processes whose name is ours, from /proc.
		for d in /proc/[0-9]*; do
			[ "$(cat "$d/comm" 2>/dev/null)" != "$NAME" ] || printf '%s ' "${d#/proc/}"
		done
	fi
}

# started_ok: the service runs within START_WAIT seconds and keeps the same process for
# START_SETTLE seconds more (a binary that exits at once, or that procd respawns in a loop,
# fails). A bounded wait: one check a second.
started_ok() {
	i=0
	p=""
	while [ "$i" -le "$START_WAIT" ]; do
		p="$(svc_pids)"
		[ -z "$p" ] || break
		sleep 1
		i=$((i + 1))
	done
	[ -n "$p" ] || return 1
	sleep "$START_SETTLE"
	[ "$(svc_pids)" = "$p" ]
}

# free_kib DIR: kilobytes free on the filesystem holding DIR (or its nearest existing parent).
free_kib() {
	d="$1"
	while [ ! -d "$d" ] && [ "$d" != / ] && [ -n "$d" ]; do d="$(dirname "$d")"; done
	"${DF:-df}" -Pk "${d:-/}" 2>/dev/null | awk 'NR > 1 && $4 ~ /^[0-9]+$/ { v = $4; m = $6 } END { if (v != "") print v " " m }'
}

# The config of a generic Linux box (docs/setup.md's paths; the tarball's example is Entware's).
linux_conf() {
	host="127.0.0.1"
	if [ -z "$R" ]; then
		a="$(ip -4 -o addr show scope global 2>/dev/null | sed -n 's/.* inet \([0-9.]*\).*/\1/p' | sed -n 1p)"
		[ -z "$a" ] || host="$a"
	fi
	cat <<EOF
# /etc/$NAME.conf — written by install.sh; one setting per line, NAME VALUE (a run flag
# without --), no comments after a value. docs/setup.md "Configuration file"; every flag:
# docs/flags.md. After a change: systemctl reload $NAME (SIGHUP), or restart it by hand.

# The address phones reach (this machine's LAN address) and the port.
host $host
port 1443
secret-file /etc/$NAME.secret
drain-timeout 5s
EOF
	if [ -n "$INIT" ]; then
		echo "# tg-ws-proxy ctl status talks to this socket (systemd makes /run/$NAME)."
		echo "control-socket /run/$NAME/ctl.sock"
	else
		echo "# For tg-ws-proxy ctl: mkdir -m 700 /run/$NAME first, then remove the '#'."
		echo "#control-socket /run/$NAME/ctl.sock"
	fi
}

# The systemd unit of a generic Linux box.
linux_unit() {
	cat <<EOF
# /etc/systemd/system/$NAME.service — written by install.sh
[Unit]
Description=tg-ws-proxy: MTProto proxy for Telegram over WebSocket/TLS
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=/usr/local/bin/$NAME run --config /etc/$NAME.conf
ExecReload=/bin/kill -HUP \$MAINPID
User=nobody
RuntimeDirectory=$NAME
RuntimeDirectoryMode=0700
Restart=on-failure
RestartSec=10
LimitNOFILE=4096

[Install]
WantedBy=multi-user.target
EOF
}

# --- uninstall -------------------------------------------------------------------------------

if [ "$UNINSTALL" -eq 1 ]; then
	if [ -n "$INIT" ] && { [ -n "$SERVICE_CMD" ] || { [ -z "$R" ] && [ -f "$INIT" ]; }; }; then
		svc stop || true
		svc disable || true
	fi
	rm -f "$R$BIN" "$R$BIN.old"
	[ -z "$INIT" ] || rm -f "$R$INIT" "$R$INIT.old"
	if [ -z "$R" ] && [ "$SYS" = linux ] && [ -n "$INIT" ] && [ -z "$SERVICE_CMD" ]; then
		systemctl daemon-reload 2>/dev/null || true
	fi
	say "removed $BIN${INIT:+ and $INIT}"
	if [ "$PURGE" -eq 1 ]; then
		rm -f "$R$CONF" "$R$CONF_NEW" "$R$SECRET"
		[ -z "$SECRET_DIR" ] || rm -rf "${R:?}$SECRET_DIR"
		say "--purge: removed $CONF and $SECRET"
	else
		say "kept $CONF and $SECRET (remove them with --uninstall --purge)"
	fi
	exit 0
fi

# --- the download (when no binary lies next to install.sh, or --base) ------------------------

WORK=""
cleanup() { [ -z "$WORK" ] || rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# fetch NAME DEST: BASE/NAME into DEST, from http(s)/ftp (uclient-fetch, wget or curl), file://
# or a local directory.
fetch() {
	case "$BASE" in
	http://* | https://* | ftp://*)
		u="${BASE%/}/$1"
		if command -v uclient-fetch >/dev/null 2>&1; then
			uclient-fetch -q -O "$2" "$u"
		elif command -v wget >/dev/null 2>&1; then
			wget -q -O "$2" "$u"
		elif command -v curl >/dev/null 2>&1; then
			curl -fsSL -o "$2" "$u"
		else
			die "no download tool (uclient-fetch, wget or curl): download $u by hand and use --base DIR"
		fi
		;;
	file://*) cp "${BASE#file://}/$1" "$2" ;;
	*) cp "$BASE/$1" "$2" ;;
	esac
}

if [ -n "$BASE" ] || [ ! -f "$HERE/$NAME" ]; then
	[ -n "$BASE" ] || BASE="$RELEASE_BASE"
	[ -n "$BASE" ] || die "no $NAME binary next to install.sh ($HERE) and no download address: pass --base URL (a release's download address, a mirror, or a directory with SHA256SUMS and the tarballs)"
	if [ -z "$TARGET" ]; then
		cpu="$(sys_cpu)"
		TARGET="$(target_of "$cpu")" ||
			die "no build for this CPU: $(describe "$cpu") (uname -m: ${UNAME_M:-$(uname -m)}); builds: mips, mipsel, armv7 (hard float), arm (soft float, ARMv6+), aarch64, x86_64"
		say "CPU: $(describe "$cpu") -> $TARGET"
	fi
	WORK="$(mktemp -d "${TMPDIR:-/tmp}/$NAME-install.XXXXXX")" || die "cannot make a temporary directory in ${TMPDIR:-/tmp}"
	fetch SHA256SUMS "$WORK/SHA256SUMS" || die "cannot download SHA256SUMS from $BASE; nothing was changed"
	line="$(awk -v t="$TARGET" '{ n = $2; sub(/^\*/, "", n) } n ~ ("^" "tg-ws-proxy-[^/]*-" t "\\.tar\\.gz$") { print $1 " " n; exit }' "$WORK/SHA256SUMS")"
	[ -n "$line" ] || die "$BASE/SHA256SUMS lists no tarball for $TARGET; nothing was changed"
	want_sum="${line%% *}"
	tgz="${line#* }"
	say "downloading $tgz from $BASE"
	fetch "$tgz" "$WORK/$tgz" || die "cannot download $BASE/$tgz; nothing was changed"
	got_sum="$(sha256sum "$WORK/$tgz" | awk '{ print $1 }')"
	if [ "$got_sum" != "$want_sum" ]; then
		die "checksum mismatch for $tgz: SHA256SUMS says $want_sum, the download is $got_sum (a broken or altered download; try again or another mirror); nothing was changed"
	fi
	say "sha256 ok: $tgz"
	(cd "$WORK" && tar xzf "$tgz") || die "cannot unpack $tgz; nothing was changed"
	HERE="$WORK/${tgz%.tar.gz}"
	[ -f "$HERE/$NAME" ] || die "$tgz holds no ${tgz%.tar.gz}/$NAME; nothing was changed"
fi

# --- checks before anything is written -------------------------------------------------------

[ -f "$HERE/$NAME" ] || die "no $NAME binary next to install.sh ($HERE)"
for f in "$INIT_SRC" "$CONF_SRC"; do
	[ -z "$f" ] || [ -f "$HERE/$f" ] || die "no $f next to install.sh ($HERE): unpack the whole tarball"
done
want="$(elf_cpu "$HERE/$NAME")"
have="$(sys_cpu)"
if [ "$want" != "$have" ] && ! { [ "$want" = arm ] && [ "$have" = armv7 ]; }; then
	die "this tarball is for $(describe "$want"), but this machine is $(describe "$have") (uname -m: ${UNAME_M:-$(uname -m)}): download the tarball for $(target_of "$have" || echo "$have"); nothing was changed"
fi
say "CPU: $(describe "$have"), matches the tarball"
CAN_RUN=0
if runs_here "$HERE/$NAME"; then
	CAN_RUN=1
	rc=0
	"$HERE/$NAME" --version >/dev/null 2>&1 || rc=$?
	if [ "$rc" -eq 126 ]; then
		die "cannot execute $HERE/$NAME (a noexec mount?): set TMPDIR to a directory that allows it; nothing was changed"
	elif [ "$rc" -ne 0 ]; then
		die "the new $NAME does not run on this machine ($HERE/$NAME --version failed, exit $rc: a wrong or damaged build); nothing was changed"
	fi
fi

# Room for the new binary next to the one it replaces (kept as $BIN.old until the next
# upgrade), plus the init script and config: checked with df before anything is written.
need_kib=$((($(wc -c <"$HERE/$NAME") + 1023) / 1024 + 64))
# shellcheck disable=SC2046 # "KIB MOUNTPOINT" into $1 $2 on purpose
set -- $(free_kib "$R$(dirname "$BIN")")
if [ "$#" -ge 1 ] && [ "$1" -lt "$need_kib" ]; then
	die "not enough free space for $BIN: it needs ${need_kib} KiB (the new binary next to the running one), ${2:-its filesystem} has $1 KiB free; free some (opkg remove unused packages) or use the tiny build; nothing was changed"
fi

# --- install ---------------------------------------------------------------------------------

UPGRADE=0
[ ! -e "$R$BIN" ] || UPGRADE=1
if [ "$PM" = opkg ] && [ -f "$R/usr/lib/opkg/info/$NAME.control" ]; then
	say "note: the $NAME ipk is installed; these files replace its files (opkg remove $NAME would remove them)"
fi

# keep FILE: FILE.old becomes the current FILE (a hard link costs no room; else a copy).
keep() {
	[ -e "$R$1" ] || return 0
	rm -f "$R$1.old"
	ln "$R$1" "$R$1.old" 2>/dev/null || cp -p "$R$1" "$R$1.old"
}
# restore FILE: FILE.old back in place (the rollback).
restore() {
	[ -e "$R$1.old" ] || return 0
	cp -p "$R$1.old" "$R$1.tmp.$$" && mv -f "$R$1.tmp.$$" "$R$1"
}

if [ "$UPGRADE" -eq 1 ]; then
	keep "$BIN"
	[ -z "$INIT" ] || keep "$INIT"
fi
# Generic Linux: the unit and the config are written by this script, not taken from the tarball.
if [ "$SYS" = linux ]; then
	[ -n "$WORK" ] || WORK="$(mktemp -d "${TMPDIR:-/tmp}/$NAME-install.XXXXXX")" ||
		die "cannot make a temporary directory in ${TMPDIR:-/tmp}"
	linux_conf >"$WORK/linux.conf"
	CONF_FROM="$WORK/linux.conf"
	if [ -n "$INIT" ]; then
		linux_unit >"$WORK/linux.service"
		INIT_FROM="$WORK/linux.service"
	fi
else
	CONF_FROM="$HERE/$CONF_SRC"
	INIT_FROM="$HERE/$INIT_SRC"
fi

put "$HERE/$NAME" "$R$BIN" 755
if [ -n "$INIT" ]; then
	if [ "$SYS" = linux ]; then put "$INIT_FROM" "$R$INIT" 644; else put "$INIT_FROM" "$R$INIT" 755; fi
fi
say "installed $BIN${INIT:+ and $INIT}"
[ "$UPGRADE" -eq 0 ] || say "kept the previous binary as $BIN.old"

if [ -f "$R$CONF" ]; then
	if cmp -s "$CONF_FROM" "$R$CONF"; then
		rm -f "$R$CONF_NEW"
		say "kept $CONF (the same as the new default)"
	else
		put "$CONF_FROM" "$R$CONF_NEW" 644
		say "kept your $CONF; the new default is in $CONF_NEW (compare: diff $CONF $CONF_NEW)"
	fi
else
	put "$CONF_FROM" "$R$CONF" 644
	say "installed $CONF"
	if [ "$SYS" = entware ] && [ -z "$R" ]; then
		ip4="$(ip -4 addr show br0 2>/dev/null | sed -n 's/.*inet \([0-9.]*\).*/\1/p' | sed -n 1p)"
		if [ -n "$ip4" ]; then
			sed -i "s/^host .*/host $ip4/" "$CONF"
			say "listen address: $ip4 (br0), written to $CONF"
		else
			say "no address on br0: set 'host' in $CONF to this router's LAN address"
		fi
	fi
	[ "$SYS" != linux ] || say "listen address: $(conf_value host) (host in $CONF: the address phones reach)"
fi

# The secret file: 0600 (in a 0700 directory on routers), owned by the service user.
if [ -n "$SECRET_DIR" ]; then
	mkdir -p "$R$SECRET_DIR"
	chmod 700 "$R$SECRET_DIR"
else
	mkdir -p "$(dirname "$R$SECRET")"
fi
old_secret=""
[ "$SYS" != openwrt ] || old_secret="$(uci_opt secret)"
if [ ! -s "$R$SECRET" ]; then
	if [ -n "$old_secret" ]; then
		# An install from before the secret file: move the plain-text secret out of /etc/config.
		(umask 077 && printf '# moved from %s by install.sh\n%s\n' "$CONF" "$old_secret" >"$R$SECRET")
		say "moved the secret from $CONF (option secret) to $SECRET"
	elif [ "$CAN_RUN" -eq 1 ] && (umask 077 && "$R$BIN" genkey >"$R$SECRET.tmp" 2>/dev/null); then
		mv -f "$R$SECRET.tmp" "$R$SECRET"
		say "created $SECRET with a new secret (mode 0600)"
	else
		# The binary cannot run here (ROOT for another CPU): 16 random bytes as hex instead.
		rm -f "$R$SECRET.tmp"
		key="$(dd if=/dev/urandom bs=16 count=1 2>/dev/null | hexdump -v -e '16/1 "%02x"' 2>/dev/null ||
			dd if=/dev/urandom bs=16 count=1 2>/dev/null | od -A n -v -t x1 | tr -d ' \n')"
		case "$key" in
		????????????????????????????????) ;;
		*) die "cannot make a secret: $BIN genkey did not run and /dev/urandom gave '$key'" ;;
		esac
		(umask 077 && printf '%s\n' "$key" >"$R$SECRET")
		say "created $SECRET with a new secret (mode 0600; from /dev/urandom: $BIN does not run here)"
	fi
else
	say "kept $SECRET"
fi
chmod 600 "$R$SECRET"
if [ -n "$old_secret" ]; then
	sed -i "/^[[:space:]]*option[[:space:]][[:space:]]*secret[[:space:]]/d" "$R$CONF"
	say "removed 'option secret' from $CONF: the secret lives in $SECRET now"
fi
if [ -z "$R" ] && { [ "$SYS" = openwrt ] || { [ "$SYS" = linux ] && [ -n "$INIT" ]; }; }; then
	u="$(service_user)"
	own="${SECRET_DIR:-$SECRET}"
	if chown -R "$u" "$own" 2>/dev/null; then
		say "$own belongs to the service user '$u'"
	else
		say "note: could not chown $own to '$u'; the service checks it at start"
	fi
fi

# --- start, check, roll back -----------------------------------------------------------------

STARTED=0
if [ -n "$R" ] && [ -z "$SERVICE_CMD" ]; then
	say "ROOT=$R: skipped enabling and starting the service"
elif [ "$NO_START" -eq 1 ]; then
	if [ -n "$INIT" ]; then
		say "--no-start: not started; later: ${INIT:+$INIT enable && $INIT start}"
	else
		say "--no-start: not started"
	fi
elif [ "$SYS" = openwrt ] && [ "$(uci_opt enabled)" = 0 ]; then
	say "option enabled is '0' in $CONF: not started (uci set $NAME.main.enabled=1 && uci commit $NAME && $INIT restart)"
elif [ -z "$INIT" ] && [ -z "$SERVICE_CMD" ]; then
	say "no systemd here: start it by hand (or from your init system): $BIN run --config $CONF"
else
	[ "$SYS" != linux ] || [ -n "$SERVICE_CMD" ] || systemctl daemon-reload
	svc enable || say "note: could not enable the service at boot"
	if [ "$UPGRADE" -eq 1 ]; then svc restart || true; else svc start || true; fi
	if started_ok; then
		STARTED=1
		if [ "$UPGRADE" -eq 1 ]; then say "upgraded and restarted"; else say "enabled and started"; fi
	elif [ "$UPGRADE" -eq 1 ] && [ -e "$R$BIN.old" ]; then
		echo "$NAME install: ERROR: the new $BIN did not keep running within ${START_WAIT}s; rolling back to the previous binary" >&2
		restore "$BIN"
		[ -z "$INIT" ] || restore "$INIT"
		[ "$SYS" != linux ] || [ -n "$SERVICE_CMD" ] || systemctl daemon-reload
		svc restart || true
		if started_ok; then
			die "rolled back: the previous $BIN runs again (the new one's messages: logread -e $NAME, or journalctl -u $NAME)"
		fi
		die "rolled back to the previous $BIN, but it does not run either: check the config ($CONF) and the log (logread -e $NAME, or journalctl -u $NAME)"
	else
		svc stop || true
		svc disable || true
		die "the service did not keep running within ${START_WAIT}s: stopped and disabled it; the files stay. Its messages: logread -e $NAME (journalctl -u $NAME), or run $BIN run --config $CONF by hand"
	fi
fi

# --- the link --------------------------------------------------------------------------------

# With the service running its init script prints the link from the configuration it uses;
# otherwise the binary does, from the installed config's port and listen address.
if [ "$STARTED" -eq 1 ] && [ -z "$SERVICE_CMD" ] && [ "$SYS" != linux ] && "$INIT" link; then
	:
else
	if [ "$SYS" = openwrt ]; then
		port="$(uci_opt port)"
		host="$(uci_opt link_ip)"
		[ -n "$host" ] || host="$(uci_opt host)"
		case "$host" in '' | 0.0.0.0 | ::) host="$(lan_ip)" ;; esac
	else
		port="$(conf_value port)"
		host="$(conf_value link-ip)"
		[ -n "$host" ] || host="$(conf_value host)"
	fi
	set -- link --secret-file "$R$SECRET" --port "${port:-1443}"
	[ -z "$host" ] || set -- "$@" --link-ip "$host"
	if [ "$CAN_RUN" -eq 0 ] || ! "$R$BIN" "$@"; then
		say "could not print the link here; on the router: ${INIT:-$BIN} link"
	fi
fi
