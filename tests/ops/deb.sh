#!/bin/bash
# deb.sh BUILD_DIR — the memdecay .deb (docs/operations.md, "Package"):
# `cpack -G DEB` builds it from BUILD_DIR; dpkg unpacks it into a scratch root
# (--root, its own database, no maintainer scripts: they would create a user
# on this machine); then the file list dpkg recorded is checked, the units
# pass `systemd-analyze verify`, the man pages render without groff warnings,
# and memdecayd --version, pkg-config and the shipped default configuration
# work from the scratch root.  Everything lives in a mktemp -d directory.
set -u
BUILD=$1
T=$(mktemp -d /tmp/md-deb.XXXXXX)
DPID=
cleanup() {
	[ -n "$DPID" ] && kill -9 "$DPID" 2>/dev/null
	[ -n "${MD_KEEP:-}" ] || rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL [ops_deb]: $*" >&2; exit 1; }

cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$T/out" >"$T/cpack.log" 2>&1 ||
	{ tail -30 "$T/cpack.log" >&2; fail "cpack -G DEB failed"; }
deb=$(ls "$T"/out/*.deb 2>/dev/null | head -1)
[ -f "$deb" ] || fail "cpack made no .deb"

info=$(dpkg-deb --info "$deb") || fail "dpkg-deb --info"
grep -q '^ Package: memdecay$' <<<"$info" || fail "package name: $info"
for dep in adduser liburing2 libmicrohttpd12 libc6; do
	grep -q "^ Depends:.*\b$dep\b" <<<"$info" || fail "Depends lacks $dep: $(grep Depends <<<"$info")"
done
mkdir "$T/ctl"
dpkg-deb -e "$deb" "$T/ctl" || fail "dpkg-deb -e"
grep -qx /etc/memdecay/memdecayd.conf "$T/ctl/conffiles" || fail "conffiles: $(cat "$T/ctl/conffiles")"
[ -x "$T/ctl/postinst" ] || fail "postinst not executable"

R=$T/root
mkdir -p "$R/var/lib/dpkg/info" "$R/var/lib/dpkg/updates"
: >"$R/var/lib/dpkg/status"
dpkg --root="$R" --force-not-root --force-depends --unpack "$deb" >"$T/dpkg.log" 2>&1 ||
	{ cat "$T/dpkg.log" >&2; fail "dpkg --root --unpack"; }
files=$(dpkg --root="$R" -L memdecay) || fail "dpkg -L"
libdir=$(sed -n 's|^\(/usr/lib[^ ]*\)/libmemdecay\.so$|\1|p' <<<"$files")
[ -n "$libdir" ] || fail "no libmemdecay.so in the package"
for f in /usr/bin/memdecayd /usr/bin/memdecayctl \
	/usr/include/memdecay/memdecay.h /usr/include/memdecay/memdecay_abi.h \
	/usr/include/memdecay/memdecay_ring.h "$libdir/libmemdecay.a" \
	"$libdir/pkgconfig/memdecay.pc" "$libdir/cmake/memdecay/memdecayConfig.cmake" \
	"$libdir/cmake/memdecay/memdecayTargets.cmake" \
	/lib/systemd/system/memdecayd.service /lib/systemd/system/memdecayd.socket \
	/etc/memdecay/memdecayd.conf /usr/share/man/man8/memdecayd.8 \
	/usr/share/man/man1/memdecayctl.1 /usr/share/man/man5/memdecayd.conf.5; do
	grep -qx "$f" <<<"$files" || fail "$f missing from the package (dpkg -L)"
	# --unpack leaves a conffile as .dpkg-new; configure (postinst) would move it
	[ -e "$R$f" ] || [ -e "$R$f.dpkg-new" ] || fail "$f listed but not in the scratch root"
done
mv "$R/etc/memdecay/memdecayd.conf.dpkg-new" "$R/etc/memdecay/memdecayd.conf" 2>/dev/null
# nothing outside the places a Debian package may use
bad=$(grep -vE '^/(\.|usr|usr/(bin|include|lib|share)(/.*)?|lib|lib/systemd(/.*)?|etc|etc/memdecay(/.*)?)$' <<<"$files")
[ -z "$bad" ] || fail "unexpected paths: $bad"
nfiles=$(while read -r f; do [ -f "$R$f" ] && echo "$f"; done <<<"$files" | wc -l)

out=$("$R/usr/bin/memdecayd" --version) || fail "memdecayd --version from the scratch root"
grep -q '^memdecayd 0\.1\.0' <<<"$out" || fail "version: $out"
"$R/usr/bin/memdecayd" --help | grep -q -- --metrics-listen || fail "--help lacks --metrics-listen"
"$R/usr/bin/memdecayctl" --help >/dev/null || fail "memdecayctl --help"

for m in man8/memdecayd.8 man1/memdecayctl.1 man5/memdecayd.conf.5; do
	w=$(MANROFFOPT=-ww man -l "$R/usr/share/man/$m" 2>&1 >/dev/null)
	[ -z "$w" ] || fail "man -l $m: $w"
done

if command -v systemd-analyze >/dev/null; then
	# the units as installed, with ExecStart= pointing into the scratch root
	mkdir "$T/units"
	for u in memdecayd.service memdecayd.socket; do
		sed "s|/usr/bin/memdecayd|$R/usr/bin/memdecayd|" "$R/lib/systemd/system/$u" >"$T/units/$u"
	done
	v=$(cd "$T/units" && systemd-analyze verify --man=no memdecayd.socket memdecayd.service 2>&1)
	[ -z "$v" ] || fail "systemd-analyze verify: $v"
fi

pc=$(PKG_CONFIG_PATH="$R$libdir/pkgconfig" pkg-config --cflags --libs memdecay) ||
	fail "pkg-config memdecay from the scratch root"
inc=$(sed -n 's/^-I\([^ ]*\) .*/\1/p' <<<"$pc")
[ "$(realpath "$inc" 2>/dev/null)" = "$(realpath "$R/usr/include/memdecay")" ] ||
	fail "pkg-config cflags point elsewhere: $pc"

# the shipped default configuration is one the daemon accepts
"$R/usr/bin/memdecayd" --foreground --socket "$T/md.sock" \
	--config "$R/etc/memdecay/memdecayd.conf" 2>"$T/daemon.log" &
DPID=$!
for _ in $(seq 100); do
	"$R/usr/bin/memdecayctl" --socket "$T/md.sock" ping >/dev/null 2>&1 && break
	kill -0 "$DPID" 2>/dev/null || { cat "$T/daemon.log" >&2; fail "memdecayd refused the default config"; }
	sleep 0.05
done
[ "$("$R/usr/bin/memdecayctl" --socket "$T/md.sock" get policy)" = memdecay ] ||
	fail "default config: policy"
kill -TERM "$DPID"; wait "$DPID"; rc=$?; DPID=
[ $rc = 0 ] || fail "memdecayd exited $rc"

echo "ops_deb: ok: $(basename "$deb") $(stat -c %s "$deb") bytes, $nfiles files, $(grep -c . <<<"$files") paths"
