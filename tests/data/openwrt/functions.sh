# tests/data/openwrt/functions.sh — a stand-in for OpenWrt's /lib/functions.sh (and /sbin/uci
# and logger), for tests/openwrt_init.rs only. Owns: config_load reading $UCI_CONFIG_DIR/PKG
# (the UCI syntax the shipped config uses: config/option/list lines, single-quoted values,
# '\'' inside them, # comments), which the real one gets from `uci export`, evaluated the
# same way, with the same config_cb/option_cb/list_cb calls (value exactly as stored; a final
# config_cb with no arguments); config_get, config_get_bool, config_list_foreach; `uci -q get`;
# logger, which records its arguments to $LOGGER_RECORD.

config_cb() { return 0; }
option_cb() { return 0; }
list_cb() { return 0; }

config_set() {
	eval "CONFIG_${1}_${2}=\$3"
}

package() { return 0; }

config() {
	CONFIG_SECTION="$2"
	config_set "$CONFIG_SECTION" TYPE "$1"
	[ -n "$NO_CALLBACK" ] || config_cb "$1" "$2"
}

option() {
	_name="$1"
	shift
	config_set "$CONFIG_SECTION" "$_name" "$*"
	[ -n "$NO_CALLBACK" ] || option_cb "$_name" "$*"
}

list() {
	_name="$1"
	shift
	eval "_len=\${CONFIG_${CONFIG_SECTION}_${_name}_LENGTH:-0}"
	_len=$((_len + 1))
	config_set "$CONFIG_SECTION" "${_name}_ITEM$_len" "$*"
	config_set "$CONFIG_SECTION" "${_name}_LENGTH" "$_len"
	[ -n "$NO_CALLBACK" ] || list_cb "$_name" "$*"
}

config_load() {
	CONFIG_SECTION=""
	_file="$UCI_CONFIG_DIR/$1"
	[ -f "$_file" ] || return 1
	eval "$(cat "$_file")"
	[ -z "$CONFIG_SECTION" ] || [ -n "$NO_CALLBACK" ] || config_cb
	return 0
}

# config_get VAR SECTION OPTION [DEFAULT]
config_get() {
	eval "$1=\${CONFIG_${2}_${3}:-\$4}"
}

config_get_bool() {
	config_get _b "$2" "$3" "$4"
	case "$_b" in
	1 | on | true | yes | enabled) _b=1 ;;
	0 | off | false | no | disabled) _b=0 ;;
	*) _b="$4" ;;
	esac
	eval "$1=\$_b"
}

config_list_foreach() {
	eval "_n=\${CONFIG_${1}_${2}_LENGTH:-0}"
	_i=1
	while [ "$_i" -le "$_n" ]; do
		eval "_v=\$CONFIG_${1}_${2}_ITEM$_i"
		"$3" "$_v"
		_i=$((_i + 1))
	done
}

# uci [-q] get PKG.SECTION.OPTION: prints the value, fails when it is not set.
uci() {
	[ "$1" != -q ] || shift
	[ "$1" = get ] || {
		echo "uci stub: only 'get' is supported" >&2
		return 1
	}
	(
		NO_CALLBACK=1
		_path="$2"
		_pkg="${_path%%.*}"
		_rest="${_path#*.}"
		config_load "$_pkg" || exit 1
		config_get _v "${_rest%%.*}" "${_rest#*.}"
		[ -n "$_v" ] || exit 1
		echo "$_v"
	)
}

logger() {
	_line=logger
	for _arg; do
		_line="$_line	$_arg"
	done
	printf '%s\n' "$_line" >>"$LOGGER_RECORD"
}
