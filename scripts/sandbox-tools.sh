#!/usr/bin/env bash
# sandbox-tools.sh installs, from Debian and only when they are missing,
# what the local sandbox provider's isolation (SANDBOX_ISOLATION=bwrap)
# runs: bubblewrap (the namespaces jail) and socat (the Unix-socket
# forwarders inside each sandbox); and the browser the dashboard's tests
# drive: Debian's chromium (headless, never a downloaded browser).
#
#   scripts/sandbox-tools.sh [install]   install what is missing (idempotent, instant when done)
#   scripts/sandbox-tools.sh check       exit 0 only if all are installed
#
# Concurrent invocations are serialised by apt's own lock (waited for up to
# five minutes).
set -euo pipefail

readonly TOOLS=(bwrap:bubblewrap socat:socat chromium:chromium)

warn() { printf 'sandbox-tools: %s\n' "$*" >&2; }
die() {
	warn "$@"
	exit 1
}

missing() {
	local t out=()
	for t in "${TOOLS[@]}"; do
		command -v "${t%%:*}" >/dev/null 2>&1 || out+=("${t#*:}")
	done
	printf '%s\n' "${out[@]}"
}

install() {
	local pkgs
	mapfile -t pkgs < <(missing | sed '/^$/d')
	((${#pkgs[@]} == 0)) && return 0
	local sudo=()
	if ((EUID != 0)); then
		command -v sudo >/dev/null || die "${pkgs[*]} missing; install as root: apt-get install ${pkgs[*]}"
		sudo=(sudo)
	fi
	command -v apt-get >/dev/null || die "${pkgs[*]} missing and no apt-get here; install them with your package manager"
	warn "installing ${pkgs[*]} with apt-get (not found on this machine)"
	local log
	log=$(mktemp -t sandbox-tools-apt.XXXXXX)
	local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -y
		-o DPkg::Lock::Timeout=300 --no-install-recommends)
	if ! "${apt[@]}" install "${pkgs[@]}" >"$log" 2>&1; then
		"${apt[@]}" update >>"$log" 2>&1 || true
		if ! "${apt[@]}" install "${pkgs[@]}" >>"$log" 2>&1; then
			tail -n 25 "$log" | sed 's/^/    /' >&2
			die "apt-get install ${pkgs[*]} failed (full log: $log)"
		fi
	fi
	rm -f "$log"
	[[ -z $(missing | sed '/^$/d') ]] || die "still missing after apt-get install: $(missing | tr '\n' ' ')"
}

case ${1:-install} in
install) install ;;
check) [[ -z $(missing | sed '/^$/d') ]] ;;
*) die "usage: $0 [install|check]" ;;
esac
