#!/usr/bin/env bash
# opencode.sh installs the pinned OpenCode agent (npm package opencode-ai) and
# its plugin SDK (@opencode-ai/plugin) into a versioned, shared cache directory.
#
#   scripts/opencode.sh [install]   install if missing (idempotent, fast when done)
#   scripts/opencode.sh path        print the absolute path of the opencode binary
#   scripts/opencode.sh plugin-dir  print a directory holding node_modules/@opencode-ai/plugin,
#                                   package.json and package-lock.json, to seed a workspace's
#                                   .opencode/ and ~/.config/opencode so OpenCode skips its
#                                   offline-blocking `npm install`
#
# Environment:
#   PROLIFERATE_TOOLS_DIR   cache root (default /var/tmp/proliferate/tools)
#   OPENCODE_VERSION        override the pinned opencode-ai version
#   OPENCODE_PLUGIN_VERSION override the pinned @opencode-ai/plugin version
#
# Concurrent invocations are serialised with flock; a stamp file marks a
# completed install, so a half-finished install is never used.
set -euo pipefail

OPENCODE_VERSION="${OPENCODE_VERSION:-1.18.33}"
OPENCODE_PLUGIN_VERSION="${OPENCODE_PLUGIN_VERSION:-1.18.33}"
TOOLS_DIR="${PROLIFERATE_TOOLS_DIR:-/var/tmp/proliferate/tools}"
DEST="${TOOLS_DIR}/opencode-${OPENCODE_VERSION}"
STAMP="${DEST}/.installed-${OPENCODE_VERSION}-plugin-${OPENCODE_PLUGIN_VERSION}"
PLUGIN_DIR="${DEST}/plugin"

die() { echo "opencode.sh: $*" >&2; exit 1; }

find_binary() {
	# The npm wrapper (node_modules/.bin/opencode) is a node launcher; prefer the
	# native binary shipped in the platform package so no node process sits in
	# between (signals and process groups then reach the agent directly).
	local candidate
	for candidate in \
		"${DEST}"/agent/node_modules/opencode-linux-x64/bin/opencode \
		"${DEST}"/agent/node_modules/opencode-linux-x64-baseline/bin/opencode \
		"${DEST}"/agent/node_modules/opencode-linux-arm64/bin/opencode \
		"${DEST}"/agent/node_modules/opencode-darwin-arm64/bin/opencode \
		"${DEST}"/agent/node_modules/opencode-darwin-x64/bin/opencode \
		"${DEST}"/agent/node_modules/opencode-ai/bin/opencode \
		"${DEST}"/agent/node_modules/.bin/opencode; do
		if [[ -x "$candidate" && -f "$candidate" ]]; then
			echo "$candidate"
			return 0
		fi
	done
	return 1
}

installed() {
	[[ -f "$STAMP" ]] && find_binary >/dev/null
}

do_install() {
	if installed; then
		return 0
	fi
	command -v npm >/dev/null 2>&1 || die "npm is required to install opencode-ai (apt-get install npm, or install Node.js)"
	mkdir -p "$TOOLS_DIR" || die "cannot create ${TOOLS_DIR}"
	local lock="${TOOLS_DIR}/.opencode-${OPENCODE_VERSION}.lock"
	exec 9>"$lock" || die "cannot open lock ${lock}"
	flock 9 || die "cannot lock ${lock}"
	# Another invocation may have finished while we waited for the lock.
	if installed; then
		exec 9>&-
		return 0
	fi
	echo "opencode.sh: installing opencode-ai@${OPENCODE_VERSION} and @opencode-ai/plugin@${OPENCODE_PLUGIN_VERSION} into ${DEST}" >&2
	rm -rf "${DEST}.tmp"
	# Never leave a half-installed tree behind.
	trap 'rm -rf "${DEST}.tmp"' EXIT
	mkdir -p "${DEST}.tmp/agent" "${DEST}.tmp/plugin"
	local npmflags=(--no-audit --no-fund --loglevel=error --no-update-notifier)
	(
		cd "${DEST}.tmp/agent"
		echo '{"name":"proliferate-opencode","private":true}' >package.json
		npm install "${npmflags[@]}" --save-exact "opencode-ai@${OPENCODE_VERSION}" >&2
	) || die "npm install opencode-ai@${OPENCODE_VERSION} failed (is the npm registry reachable?)"
	(
		cd "${DEST}.tmp/plugin"
		echo '{"name":"opencode-plugin-deps","private":true}' >package.json
		npm install "${npmflags[@]}" --save-exact "@opencode-ai/plugin@${OPENCODE_PLUGIN_VERSION}" >&2
	) || die "npm install @opencode-ai/plugin@${OPENCODE_PLUGIN_VERSION} failed"
	[[ -f "${DEST}.tmp/plugin/package-lock.json" ]] || die "npm did not write a package-lock.json for the plugin"
	[[ -d "${DEST}.tmp/plugin/node_modules/@opencode-ai/plugin" ]] || die "plugin package missing after install"
	rm -rf "$DEST"
	mv "${DEST}.tmp" "$DEST"
	find_binary >/dev/null || die "installed opencode-ai@${OPENCODE_VERSION} but found no opencode binary under ${DEST}/agent/node_modules"
	local bin
	bin="$(find_binary)"
	"$bin" --version >/dev/null 2>&1 || die "opencode binary ${bin} does not run"
	touch "$STAMP"
	trap - EXIT
	exec 9>&-
	echo "opencode.sh: installed $("$bin" --version 2>/dev/null) at ${bin}" >&2
}

cmd="${1:-install}"
case "$cmd" in
install)
	do_install
	;;
path)
	do_install
	find_binary
	;;
plugin-dir)
	do_install
	echo "$PLUGIN_DIR"
	;;
version)
	echo "$OPENCODE_VERSION"
	;;
-h | --help | help)
	sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
	;;
*)
	die "unknown command '${cmd}' (want install, path, plugin-dir, version)"
	;;
esac
