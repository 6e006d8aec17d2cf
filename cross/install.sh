#!/bin/sh
# install.sh — installs tg-ws-proxy from an unpacked `make dist` tarball on a router: OpenWrt
# (opkg or apk) or Entware (Keenetic). Owns: detecting the system and the CPU, refusing a
# tarball built for another CPU, where each file goes, keeping an existing config on upgrade,
# creating the 0600 secret file, enabling/starting the service and printing the link; and
# --uninstall. Must not touch: anything outside the files it lists below; the contents of an
# existing config (except moving an old plain-text `option secret` into the secret file).
# busybox sh, `set -eu`, no bashisms (shellcheck -s sh clean).
#
# Usage: sh install.sh [--no-start] [--uninstall [--purge]]
#   (no option)   install or upgrade, enable and start (restart on upgrade), print the link
#   --no-start    install but do not enable or start
#   --uninstall   stop, disable, remove the binary and the init script; config and secret stay
#   --purge       with --uninstall: remove the config and the secret file too
# Environment:
#   ROOT=DIR      install under DIR instead of / (tests, image building): nothing is started
#                 and no owner is changed; the system and CPU are read from DIR/etc and DIR/bin
#   UNAME_M=NAME  the machine to assume instead of `uname -m` (building an image for another
#                 CPU under ROOT; tests, since Debian's busybox sh always runs its own uname)
#
# Files: OpenWrt /usr/bin/tg-ws-proxy, /etc/init.d/tg-ws-proxy (procd), /etc/config/tg-ws-proxy
# (UCI; on upgrade the new default goes to /etc/config/tg-ws-proxy-opkg, with apk
# tg-ws-proxy.apk-new), /etc/tg-ws-proxy/secret.
# Entware /opt/sbin/tg-ws-proxy, /opt/etc/init.d/S99tg-ws-proxy, /opt/etc/tg-ws-proxy.conf (new
# default: /opt/etc/tg-ws-proxy.conf.new), /opt/etc/tg-ws-proxy/secret.
set -eu

NAME=tg-ws-proxy
HERE="$(cd "$(dirname "$0")" && pwd)"

say() { echo "$NAME install: $*"; }
die() {
	echo "$NAME install: ERROR: $*" >&2
	exit 1
}

NO_START=0
UNINSTALL=0
PURGE=0
for a in "$@"; do
	case "$a" in
	--no-start) NO_START=1 ;;
	--uninstall) UNINSTALL=1 ;;
	--purge) PURGE=1 ;;
	-h | --help)
		sed -n '2,/^set -eu/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
		exit 0
		;;
	*) die "unknown option '$a' (options: --no-start, --uninstall, --purge, --help)" ;;
	esac
done
[ "$PURGE" -eq 0 ] || [ "$UNINSTALL" -eq 1 ] || die "--purge goes with --uninstall"

ROOT="${ROOT:-/}"
R="${ROOT%/}" # "" for /, so "$R/etc" is /etc
if [ -n "$R" ]; then
	[ -d "$R" ] || die "ROOT=$ROOT is not a directory"
	R="$(cd "$R" && pwd)"
elif [ "$(id -u)" -ne 0 ]; then
	die "run as root (or set ROOT=DIR to install under DIR)"
fi

# --- the system ------------------------------------------------------------------------------

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
elif [ -x "$R/opt/bin/opkg" ] && [ -d "$R/opt/etc" ]; then
	SYS=entware PM=opkg
	BIN=/opt/sbin/$NAME
	INIT=/opt/etc/init.d/S99$NAME
	INIT_SRC=S99$NAME
	CONF=/opt/etc/$NAME.conf
	CONF_SRC=$NAME.conf.example
	CONF_NEW=$CONF.new
	SECRET_DIR=/opt/etc/$NAME
else
	die "this is neither OpenWrt ($R/etc/openwrt_release) nor Entware ($R/opt/bin/opkg and $R/opt/etc); install.sh supports only those. Elsewhere run the binary by hand: ./$NAME run --config $NAME.conf.example (see README.txt)"
fi
SECRET=$SECRET_DIR/secret
say "system: $SYS (package manager: $PM)${R:+, under ROOT=$R}"

# --- the CPU ---------------------------------------------------------------------------------

# elf_bytes FILE: the first 20 bytes of FILE as lowercase hex, one space between.
elf_bytes() {
	if command -v hexdump >/dev/null 2>&1; then
		hexdump -n 20 -e '20/1 "%02x " "\n"' "$1"
	elif command -v od >/dev/null 2>&1; then
		od -A n -t x1 -N 20 "$1" | tr -s ' \n' '  '
	else
		die "neither hexdump nor od found: cannot read $1's ELF header"
	fi
}

# elf_cpu FILE: mips | mipsel | armv7 | aarch64 | x86_64 | other:MACHINE, from the ELF header
# (byte 5: 1 little-endian, 2 big-endian; bytes 18-19: e_machine in that byte order).
elf_cpu() {
	# shellcheck disable=SC2046 # split the hex bytes into $1..$20 on purpose
	set -- $(elf_bytes "$1")
	if [ "$#" -lt 20 ] || [ "$1$2$3$4" != 7f454c46 ]; then
		echo "not-elf"
		return 0
	fi
	if [ "$6" = 02 ]; then m=${20}; else m=${19}; fi
	case "$m:$6" in
	08:02) echo mips ;;
	08:01) echo mipsel ;;
	28:*) echo armv7 ;;
	b7:*) echo aarch64 ;;
	3e:*) echo x86_64 ;;
	*) echo "other:e_machine=0x$m" ;;
	esac
}

# The router's CPU: `uname -m`, and for MIPS the byte order of the system's own busybox.
sys_cpu() {
	m="${UNAME_M:-$(uname -m)}"
	case "$m" in
	x86_64 | amd64) echo x86_64 ;;
	aarch64 | arm64) echo aarch64 ;;
	armv7* | armv8*) echo armv7 ;;
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
# files from their redirections). Without /proc the answer is "try it".
runs_here() {
	[ -r /proc/self/exe ] || return 0
	here="$(elf_cpu /proc/self/exe 2>/dev/null)" || return 0
	case "$here" in not-elf | '') return 0 ;; esac
	[ "$(elf_cpu "$1")" = "$here" ]
}

describe() {
	case "$1" in
	mips) echo "big-endian MIPS32 (mips_24kc)" ;;
	mipsel) echo "little-endian MIPS32 (mipsel_24kc)" ;;
	armv7) echo "ARMv7 with FPU" ;;
	aarch64) echo "64-bit ARM" ;;
	x86_64) echo "x86-64" ;;
	*) echo "$1" ;;
	esac
}

if [ "$UNINSTALL" -eq 0 ]; then
	[ -f "$HERE/$NAME" ] || die "no $NAME binary next to install.sh ($HERE)"
	for f in "$INIT_SRC" "$CONF_SRC"; do
		[ -f "$HERE/$f" ] || die "no $f next to install.sh ($HERE): unpack the whole tarball"
	done
	want="$(elf_cpu "$HERE/$NAME")"
	have="$(sys_cpu)"
	if [ "$want" != "$have" ]; then
		die "this tarball is for $(describe "$want"), but this router is $(describe "$have") (uname -m: ${UNAME_M:-$(uname -m)}): download the tarball for $have"
	fi
	say "CPU: $(describe "$have"), matches the tarball"
fi

# --- helpers ---------------------------------------------------------------------------------

# uci_opt NAME: the value of `option NAME` in the installed UCI config (quotes removed).
uci_opt() {
	sed -n "s/^[[:space:]]*option[[:space:]][[:space:]]*$1[[:space:]][[:space:]]*['\"]\\{0,1\\}\\([^'\"]*\\)['\"]\\{0,1\\}[[:space:]]*\$/\\1/p" \
		"$R$CONF" 2>/dev/null | sed -n '$p'
}

# conf_value NAME: the value of NAME in the installed config file (Entware format).
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

# --- uninstall -------------------------------------------------------------------------------

if [ "$UNINSTALL" -eq 1 ]; then
	if [ -z "$R" ] && [ -x "$INIT" ]; then
		"$INIT" stop || true
		[ "$SYS" != openwrt ] || "$INIT" disable || true
	fi
	rm -f "$R$BIN" "$R$INIT"
	say "removed $BIN and $INIT"
	if [ "$PURGE" -eq 1 ]; then
		rm -f "$R$CONF" "$R$CONF_NEW"
		rm -rf "${R:?}$SECRET_DIR"
		say "--purge: removed $CONF and $SECRET_DIR"
	else
		say "kept $CONF and $SECRET (remove them with --uninstall --purge)"
	fi
	exit 0
fi

# --- install ---------------------------------------------------------------------------------

UPGRADE=0
[ ! -e "$R$BIN" ] || UPGRADE=1
if [ "$PM" = opkg ] && [ -f "$R/usr/lib/opkg/info/$NAME.control" ]; then
	say "note: the $NAME ipk is installed; these files replace its files (opkg remove $NAME would remove them)"
fi

put "$HERE/$NAME" "$R$BIN" 755
put "$HERE/$INIT_SRC" "$R$INIT" 755
say "installed $BIN and $INIT"

if [ -f "$R$CONF" ]; then
	if cmp -s "$HERE/$CONF_SRC" "$R$CONF"; then
		rm -f "$R$CONF_NEW"
		say "kept $CONF (the same as the new default)"
	else
		put "$HERE/$CONF_SRC" "$R$CONF_NEW" 644
		say "kept your $CONF; the new default is in $CONF_NEW (compare: diff $CONF $CONF_NEW)"
	fi
else
	put "$HERE/$CONF_SRC" "$R$CONF" 644
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
fi

# The secret file: 0600 in a 0700 directory, owned by the service user.
mkdir -p "$R$SECRET_DIR"
chmod 700 "$R$SECRET_DIR"
old_secret=""
[ "$SYS" != openwrt ] || old_secret="$(uci_opt secret)"
if [ ! -s "$R$SECRET" ]; then
	if [ -n "$old_secret" ]; then
		# An install from before the secret file: move the plain-text secret out of /etc/config.
		(umask 077 && printf '# moved from %s by install.sh\n%s\n' "$CONF" "$old_secret" >"$R$SECRET")
		say "moved the secret from $CONF (option secret) to $SECRET"
	elif runs_here "$R$BIN" && (umask 077 && "$R$BIN" genkey >"$R$SECRET.tmp" 2>/dev/null); then
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
if [ -z "$R" ] && [ "$SYS" = openwrt ]; then
	u="$(service_user)"
	if chown -R "$u" "$SECRET_DIR" 2>/dev/null; then
		say "$SECRET_DIR belongs to the service user '$u'"
	else
		say "note: could not chown $SECRET_DIR to '$u'; the init script checks it at start"
	fi
fi

# --- start -----------------------------------------------------------------------------------

STARTED=0
if [ -n "$R" ]; then
	say "ROOT=$R: skipped enabling and starting the service"
elif [ "$NO_START" -eq 1 ]; then
	say "--no-start: not started; later: $INIT enable && $INIT start"
else
	[ "$SYS" != openwrt ] || "$INIT" enable
	if [ "$UPGRADE" -eq 1 ]; then
		"$INIT" restart
		say "upgraded and restarted"
	else
		"$INIT" start
		say "enabled and started"
	fi
	STARTED=1
fi

# --- the link --------------------------------------------------------------------------------

# With the service running its init script prints the link from the configuration it uses;
# otherwise the binary does, from the installed config's port and listen address.
if [ "$STARTED" -eq 1 ] && "$INIT" link; then
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
	if ! runs_here "$R$BIN" || ! "$R$BIN" "$@"; then
		say "could not print the link here; on the router: $INIT link"
	fi
fi
