# tests/data/openwrt/network.sh — a stand-in for OpenWrt's /lib/functions/network.sh, for
# tests/openwrt_init.rs only. Owns: network_flush_cache (nothing to flush here) and
# network_get_ipaddr VAR IFACE, which the real one answers from netifd's ubus status of IFACE
# (its first IPv4 address); here the "status" is the file $TG_ROOT/netifd/IFACE, which a test
# writes to play a lease: absent = the interface has no address (VAR empty, status 1).

network_flush_cache() { :; }

network_get_ipaddr() {
	eval "$1=''"
	[ -r "$TG_ROOT/netifd/$2" ] || return 1
	eval "$1=\"\$(cat \"\$TG_ROOT/netifd/\$2\")\""
}
