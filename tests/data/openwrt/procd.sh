# tests/data/openwrt/procd.sh — a stand-in for OpenWrt's /lib/functions/procd.sh, for
# tests/openwrt_init.rs only. Owns: recording every procd_* call as one line in $PROCD_RECORD
# (the function name, then each argument after a tab, verbatim) instead of talking to procd.
# procd_close_service calls service_triggers, as the real one does.

procd_record() {
	_line="$1"
	shift
	for _arg; do
		_line="$_line	$_arg"
	done
	printf '%s\n' "$_line" >>"$PROCD_RECORD"
}

procd_open_service() { procd_record procd_open_service "$@"; }
procd_close_service() {
	if type service_triggers >/dev/null 2>&1; then
		service_triggers
	fi
	procd_record procd_close_service "$@"
}
procd_open_instance() { procd_record procd_open_instance "$@"; }
procd_close_instance() { procd_record procd_close_instance "$@"; }
procd_set_param() { procd_record procd_set_param "$@"; }
procd_append_param() { procd_record procd_append_param "$@"; }
procd_open_trigger() { procd_record procd_open_trigger "$@"; }
procd_close_trigger() { procd_record procd_close_trigger "$@"; }
procd_add_reload_trigger() { procd_record procd_add_reload_trigger "$@"; }
procd_add_interface_trigger() { procd_record procd_add_interface_trigger "$@"; }
procd_add_reload_interface_trigger() { procd_record procd_add_reload_interface_trigger "$@"; }
procd_kill() { procd_record procd_kill "$@"; }
procd_send_signal() { procd_record procd_send_signal "$@"; }
