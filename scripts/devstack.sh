#!/usr/bin/env bash
# devstack.sh: a private PostgreSQL 15 and Redis on loopback for `make run` and
# `make test`, on a plain Debian machine (no Docker, no systemd needed).
#
#   scripts/devstack.sh up        install what is missing, start or reuse both servers
#   scripts/devstack.sh down      stop both (data stays)
#   scripts/devstack.sh status    what runs where; exit 0 only if both are up
#   scripts/devstack.sh env       export lines: eval "$(scripts/devstack.sh env)"
#   scripts/devstack.sh destroy   down + remove the state dir
#
# Profiles: dev (default) uses ports 15432/16379 and /var/tmp/proliferate/dev;
# ci (CI=true or PROLIFERATE_STACK=ci) uses 25432/26379, /var/tmp/proliferate/ci
# and runs Postgres with fsync=off (a throwaway cluster).
# Overrides: PROLIFERATE_STACK (dev|ci), PROLIFERATE_STACK_DIR,
# PROLIFERATE_PG_PORT, PROLIFERATE_REDIS_PORT.
#
# As root, initdb and postgres run as the `postgres` OS user (they refuse root);
# otherwise everything runs as the calling user.
set -euo pipefail
umask 022 # the postgres OS user must be able to traverse what we create

readonly PG_MAJOR=15
readonly PG_BIN=/usr/lib/postgresql/${PG_MAJOR}/bin
readonly PG_ROLE=proliferate
readonly PG_DB=proliferate
readonly WAIT_SECONDS=30   # deadline for every readiness poll
readonly POLL=0.05         # poll interval (seconds)
readonly MARKER=.devstack  # marks a state dir as ours (destroy checks it)

say() { printf '%s\n' "$*"; }
warn() { printf 'devstack: %s\n' "$*" >&2; }
die() {
	warn "$@"
	exit 1
}

is_true() {
	case ${1,,} in
	1 | true | yes | on) return 0 ;;
	*) return 1 ;;
	esac
}

# ---------------------------------------------------------------- profile ---

if [[ -n ${PROLIFERATE_STACK:-} ]]; then
	PROFILE=$PROLIFERATE_STACK
elif is_true "${CI:-}"; then
	PROFILE=ci
else
	PROFILE=dev
fi
case $PROFILE in
dev) default_pg_port=15432 default_redis_port=16379 ;;
ci) default_pg_port=25432 default_redis_port=26379 ;;
*) die "unknown profile PROLIFERATE_STACK=$PROFILE (want dev or ci)" ;;
esac
PG_PORT=${PROLIFERATE_PG_PORT:-$default_pg_port}
REDIS_PORT=${PROLIFERATE_REDIS_PORT:-$default_redis_port}
STACK_DIR=${PROLIFERATE_STACK_DIR:-/var/tmp/proliferate/$PROFILE}

for v in PG_PORT REDIS_PORT; do
	if [[ ! ${!v} =~ ^[0-9]+$ ]] || ((10#${!v} < 1 || 10#${!v} > 65535)); then
		die "invalid port ${!v} (PROLIFERATE_${v})"
	fi
done
PG_PORT=$((10#$PG_PORT))
REDIS_PORT=$((10#$REDIS_PORT))
((PG_PORT != REDIS_PORT)) || die "Postgres and Redis cannot share port $PG_PORT"

[[ $STACK_DIR == /* ]] || STACK_DIR=$PWD/$STACK_DIR
while [[ $STACK_DIR == */ && $STACK_DIR != / ]]; do STACK_DIR=${STACK_DIR%/}; done
[[ $STACK_DIR != / ]] || die "PROLIFERATE_STACK_DIR must not be /"

set_paths() {
	PGDATA=$STACK_DIR/pg
	PGSOCK=$STACK_DIR/pg-run
	PGLOG=$STACK_DIR/pg.log
	REDIS_DIR=$STACK_DIR/redis
	REDIS_PIDFILE=$STACK_DIR/redis.pid
	REDIS_LOG=$STACK_DIR/redis.log
	LOCKFILE=$STACK_DIR/devstack.lock
}
# Canonical path (the servers' /proc/<pid>/cwd is compared against it).
if [[ -d $STACK_DIR ]]; then STACK_DIR=$(cd "$STACK_DIR" && pwd -P); fi
set_paths
SELF=${BASH_SOURCE[0]}
[[ $SELF == /* ]] || SELF=$PWD/$SELF
cd /  # runuser keeps the cwd; the postgres user may not be able to read ours

DATABASE_URL="postgres://${PG_ROLE}@127.0.0.1:${PG_PORT}/${PG_DB}?sslmode=disable"
REDIS_URL="redis://127.0.0.1:${REDIS_PORT}/0"

REDIS_SERVER=$(command -v redis-server || echo /usr/bin/redis-server)
REDIS_CLI=$(command -v redis-cli || echo /usr/bin/redis-cli)

# ---------------------------------------------------------------- helpers ---

# as_pg runs a command as the postgres OS user when we are root.
as_pg() {
	if ((EUID == 0)); then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# own_pg gives paths to the postgres OS user when we are root.
own_pg() {
	if ((EUID == 0)); then chown postgres:postgres "$@"; fi
}

now_ms() {
	local t=${EPOCHREALTIME/[.,]/}
	NOW_MS=$((10#$t / 1000))
}

# wait_for SECONDS CMD...: run CMD every $POLL until it succeeds (return 0),
# gives up (CMD returned 2: return 2) or the deadline passes (return 1).
wait_for() {
	local deadline rc
	now_ms
	deadline=$((NOW_MS + $1 * 1000))
	shift
	while :; do
		rc=0
		"$@" || rc=$?
		if ((rc == 0 || rc == 2)); then return "$rc"; fi
		now_ms
		if ((NOW_MS >= deadline)); then return 1; fi
		sleep "$POLL"
	done
}

# pid_alive PID: the process exists and is not a zombie (a killed server stays a
# zombie until reaped and still passes kill -0).
pid_alive() {
	local stat state
	[[ $1 =~ ^[0-9]+$ ]] || return 1
	{ read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
	state=${stat##*) }
	state=${state%% *}
	[[ $state != Z && $state != X && $state != x ]]
}

pid_dead() { ! pid_alive "$1"; }

# proc_is_ours PID COMM DIR: a live process named COMM whose cwd is DIR (both
# postgres and redis-server chdir into their data dir).
proc_is_ours() {
	local comm cwd
	pid_alive "$1" || return 1
	{ read -r comm <"/proc/$1/comm"; } 2>/dev/null || return 1
	[[ $comm == "$2" ]] || return 1
	cwd=$(readlink "/proc/$1/cwd" 2>/dev/null) || return 1
	[[ $cwd == "$3" ]]
}

# find_procs COMM DIR: pids of live processes named COMM running in DIR.
find_procs() {
	local d comm cwd
	for d in /proc/[0-9]*; do
		{ read -r comm <"$d/comm"; } 2>/dev/null || continue
		[[ $comm == "$1" ]] || continue
		cwd=$(readlink "$d/cwd" 2>/dev/null) || continue
		if [[ $cwd == "$2" ]] && pid_alive "${d#/proc/}"; then
			printf '%s\n' "${d#/proc/}"
		fi
	done
}

# port_in_use PORT: something listens on a TCP address that conflicts with
# 127.0.0.1:PORT (127.0.0.1, 0.0.0.0, ::, ::ffff:127.0.0.1, ::ffff:0.0.0.0).
# /proc/net/tcp* lines: "sl local_addr:PORT rem_addr:port state ..." in hex,
# state 0A = LISTEN; one grep, since TIME_WAIT lines can number thousands.
port_in_use() {
	local hex addrs
	printf -v hex '%04X' "$1"
	addrs='0100007F|00000000|0{32}|0{16}FFFF00000100007F|0{16}FFFF0{8}'
	grep -Eqs "^ *[0-9]+: ($addrs):$hex [0-9A-F]+:[0-9A-F]+ 0A " /proc/net/tcp /proc/net/tcp6
}

# refuse_foreign WHAT PORT VAR: the port is held by something that is not ours.
refuse_foreign() {
	local holder=""
	if command -v ss >/dev/null; then
		holder=$(ss -Hltnp "( sport = :$2 )" 2>/dev/null |
			grep -o '"[^"]*",pid=[0-9]*' |
			sed -E 's/^"([^"]*)",pid=([0-9]+)$/pid \2 (\1)/' | sort -u | paste -sd, - || true)
	fi
	local msg="port $2 for $1 (profile $PROFILE) is already in use on 127.0.0.1"
	if [[ -n $holder ]]; then
		msg+=" by $holder"
	else
		msg+=" by another program"
	fi
	msg+=", which is not this devstack's server (state dir $STACK_DIR); refusing to touch it."
	msg+=" Stop that program or pick another port, e.g. $3=<free port> scripts/devstack.sh up"
	msg+=" (and set the same variable for 'env')."
	die "$msg"
}

log_tail() { # FILE
	if [[ -s $1 ]]; then
		warn "last lines of $1:"
		tail -n 25 "$1" | sed 's/^/    /' >&2
	fi
}

apt_install() { # PKG
	local pkg=$1 sudo=() aptlog=$STACK_DIR/apt.log
	if ((EUID != 0)); then
		command -v sudo >/dev/null || die "$pkg is missing; install it as root: apt-get install $pkg"
		sudo=(sudo)
	fi
	warn "installing $pkg with apt-get (not found on this machine)"
	local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -y
		-o DPkg::Lock::Timeout=300 --no-install-recommends)
	# Packages may start services: never let them inherit our lock (fd 9).
	if ! "${apt[@]}" install "$pkg" >"$aptlog" 2>&1 9>&-; then
		"${apt[@]}" update >>"$aptlog" 2>&1 9>&- || true
		if ! "${apt[@]}" install "$pkg" >>"$aptlog" 2>&1 9>&-; then
			log_tail "$aptlog"
			die "apt-get install $pkg failed (full log: $aptlog)"
		fi
	fi
}

ensure_installed() {
	local b
	for b in postgres initdb pg_ctl; do
		if [[ ! -x $PG_BIN/$b ]]; then
			apt_install "postgresql-$PG_MAJOR"
			break
		fi
	done
	for b in psql pg_isready; do
		if [[ ! -x $PG_BIN/$b ]]; then
			apt_install "postgresql-client-$PG_MAJOR"
			break
		fi
	done
	for b in postgres initdb pg_ctl psql pg_isready; do
		[[ -x $PG_BIN/$b ]] || die "$PG_BIN/$b is still missing after installing PostgreSQL $PG_MAJOR"
	done
	if [[ ! -x $REDIS_SERVER || ! -x $REDIS_CLI ]]; then
		apt_install redis-server
		REDIS_SERVER=$(command -v redis-server || echo /usr/bin/redis-server)
		REDIS_CLI=$(command -v redis-cli || echo /usr/bin/redis-cli)
		[[ -x $REDIS_SERVER && -x $REDIS_CLI ]] || die "redis-server/redis-cli still missing after installing redis-server"
	fi
	if ((EUID == 0)) && ! id -u postgres >/dev/null 2>&1; then
		die "the postgres OS user does not exist (is postgresql-$PG_MAJOR installed properly?)"
	fi
}

# foreign_dir DIR: DIR has entries but not our marker. One listing decides, so
# a concurrent devstack.sh creating the marker (always the first entry) is safe.
foreign_dir() {
	local entries=() e
	shopt -s nullglob dotglob
	entries=("$1"/*)
	shopt -u nullglob dotglob
	((${#entries[@]} > 0)) || return 1
	for e in "${entries[@]}"; do
		if [[ ${e##*/} == "$MARKER" ]]; then return 1; fi
	done
	return 0
}

# lock_stack creates the state dir and takes an exclusive lock on it (fd 9).
lock_stack() {
	for _ in 1 2 3 4 5; do
		if [[ -d $STACK_DIR ]]; then
			if foreign_dir "$STACK_DIR"; then
				die "$STACK_DIR exists, is not empty and was not made by devstack.sh; choose another PROLIFERATE_STACK_DIR"
			fi
		else
			mkdir -p "$STACK_DIR"
		fi
		STACK_DIR=$(cd "$STACK_DIR" && pwd -P)
		set_paths
		: >>"$STACK_DIR/$MARKER"
		exec 9>>"$LOCKFILE"
		if ! flock -w 300 9; then
			die "timed out waiting for another devstack.sh working on $STACK_DIR (lock $LOCKFILE)"
		fi
		# destroy may have removed the dir while we waited: lock the new file.
		if [[ /proc/self/fd/9 -ef $LOCKFILE ]]; then return 0; fi
		exec 9>&-
	done
	die "could not lock $LOCKFILE"
}

# --------------------------------------------------------------- postgres ---

# pg_read_pidfile sets PM_PID and PM_PORT from postmaster.pid.
pg_read_pidfile() {
	local lines=()
	PM_PID="" PM_PORT=""
	[[ -f $PGDATA/postmaster.pid ]] || return 1
	mapfile -t -n 4 lines 2>/dev/null <"$PGDATA/postmaster.pid" || return 1
	PM_PID=${lines[0]:-}
	PM_PORT=${lines[3]:-}
	[[ -n $PM_PID ]]
}

# pg_running: our postmaster (per postmaster.pid) is alive.
pg_running() {
	pg_read_pidfile && proc_is_ours "$PM_PID" postgres "$PGDATA"
}

pg_ready() { # PORT
	"$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$1" -U "$PG_ROLE" -d postgres -t 2 >/dev/null 2>&1
}

# pg_ready_probe: 0 ready, 2 our postmaster died, 1 not yet.
pg_ready_probe() {
	if pg_ready "$PG_PORT"; then return 0; fi
	if ! proc_is_ours "$PM_PID" postgres "$PGDATA"; then return 2; fi
	return 1
}

pg_no_orphans() { [[ -z $(find_procs postgres "$PGDATA") ]]; }

psql_q() { # SQL
	"$PG_BIN/psql" -X -q -tA -v ON_ERROR_STOP=1 \
		-d "host=127.0.0.1 port=$PG_PORT user=$PG_ROLE dbname=postgres sslmode=disable connect_timeout=10" \
		-c "$1"
}

pg_ensure_db() {
	local have
	have=$(psql_q "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'") ||
		die "cannot query postgres on 127.0.0.1:$PG_PORT as role $PG_ROLE"
	if [[ $have != 1 ]]; then
		psql_q "CREATE DATABASE $PG_DB OWNER $PG_ROLE" >/dev/null ||
			die "cannot create database $PG_DB on 127.0.0.1:$PG_PORT"
	fi
}

pg_stop() { # stop our running postmaster (PM_PID set by pg_running)
	local out
	if ! out=$(as_pg "$PG_BIN/pg_ctl" stop -D "$PGDATA" -m fast -w -t 60 -s 2>&1 9>&-); then
		warn "pg_ctl stop failed: $out"
		log_tail "$PGLOG"
		exit 1
	fi
}

pg_write_conf() {
	local conf=$PGDATA/devstack.conf
	{
		echo "# Written by scripts/devstack.sh on every start; edits are lost."
		echo "listen_addresses = '127.0.0.1'"
		echo "port = $PG_PORT"
		echo "unix_socket_directories = '$PGSOCK'"
		echo "max_connections = 300"
		echo "log_destination = 'stderr'"
		echo "logging_collector = off"
		if [[ $PROFILE == ci ]]; then
			echo "# throwaway CI cluster"
			echo "fsync = off"
			echo "full_page_writes = off"
		else
			echo "fsync = on"
			echo "full_page_writes = on"
			echo "# after a crash, one syncfs() instead of an fsync per file (2+ s here)"
			echo "recovery_init_sync_method = syncfs"
		fi
	} >"$conf"
	own_pg "$conf"
	if ! grep -qx "include 'devstack.conf'" "$PGDATA/postgresql.conf"; then
		printf '\n%s\n' "include 'devstack.conf'" >>"$PGDATA/postgresql.conf"
	fi
}

pg_initdb() {
	local locale=C args=() locales
	locales=$(locale -a 2>/dev/null || true)
	if grep -qix 'c\.utf-\?8' <<<"$locales"; then locale=C.UTF-8; fi
	rm -rf "$PGDATA"
	mkdir -m 0700 "$PGDATA"
	own_pg "$PGDATA"
	args=(-D "$PGDATA" -U "$PG_ROLE" --auth=trust -E UTF8 --locale="$locale" --no-instructions)
	if [[ $PROFILE == ci ]]; then args+=(--no-sync); fi
	local out
	if ! out=$(as_pg "$PG_BIN/initdb" "${args[@]}" 2>&1 9>&-); then
		printf '%s\n' "$out" | tail -n 25 >&2
		die "initdb failed for $PGDATA"
	fi
}

pg_up() {
	local how=started f pid out rc
	if pg_running; then
		if [[ $PM_PORT == "$PG_PORT" ]]; then
			rc=0
			wait_for "$WAIT_SECONDS" pg_ready_probe || rc=$?
			if ((rc == 0)); then
				pg_ensure_db
				say "postgres $PG_MAJOR on 127.0.0.1:$PG_PORT (data $PGDATA) [reused]"
				return 0
			fi
			if ((rc == 1)); then
				log_tail "$PGLOG"
				die "our postgres (pid $PM_PID, data $PGDATA) runs but does not accept connections on 127.0.0.1:$PG_PORT after ${WAIT_SECONDS}s"
			fi
			# it died while we waited: recover below
		else
			if port_in_use "$PG_PORT"; then refuse_foreign postgres "$PG_PORT" PROLIFERATE_PG_PORT; fi
			warn "postgres of $PGDATA runs on port $PM_PORT, restarting it on $PG_PORT"
			pg_stop
			how=restarted
		fi
	fi

	# Not running. Anything left by a killed server is stale.
	if [[ -e $PGDATA/postmaster.pid ]]; then
		how=recovered
		# Children of a killed postmaster exit on their own shortly; they must be
		# gone before the data dir is reused.
		if ! wait_for 10 pg_no_orphans; then
			pid=$(find_procs postgres "$PGDATA" | paste -sd' ' -)
			warn "killing leftover processes of the dead postgres in $PGDATA: $pid"
			# shellcheck disable=SC2086 # word splitting wanted
			kill -KILL $pid 2>/dev/null || true
			wait_for 5 pg_no_orphans || die "leftover postgres processes ($pid) of $PGDATA do not exit"
		fi
		rm -f "$PGDATA/postmaster.pid"
	fi
	mkdir -p "$PGSOCK"
	own_pg "$PGSOCK"
	for f in "$PGSOCK"/.s.PGSQL.*.lock; do
		[[ -e $f ]] || continue
		pid=""
		{ read -r pid <"$f"; } 2>/dev/null || true
		if ! proc_is_ours "$pid" postgres "$PGDATA"; then
			rm -f "$f" "${f%.lock}"
			how=recovered
		fi
	done

	if port_in_use "$PG_PORT"; then refuse_foreign postgres "$PG_PORT" PROLIFERATE_PG_PORT; fi
	as_pg test -x "$STACK_DIR" ||
		die "the postgres OS user cannot reach $STACK_DIR; make its parent dirs world-executable (chmod o+x) or set PROLIFERATE_STACK_DIR"

	if [[ ! -f $PGDATA/PG_VERSION ]]; then pg_initdb; fi
	pg_write_conf
	touch "$PGLOG"
	if (($(stat -c %s "$PGLOG") > 64 * 1024 * 1024)); then : >"$PGLOG"; fi
	own_pg "$PGLOG"

	# pg_ctl -w polls postmaster.pid until the server is ready (deadline -t) and
	# notices when the postmaster dies early.
	if ! out=$(as_pg "$PG_BIN/pg_ctl" start -D "$PGDATA" -l "$PGLOG" -w -t "$WAIT_SECONDS" -s 2>&1 9>&-); then
		warn "postgres did not start on 127.0.0.1:$PG_PORT: $out"
		log_tail "$PGLOG"
		exit 1
	fi
	if ! wait_for "$WAIT_SECONDS" pg_ready "$PG_PORT"; then
		log_tail "$PGLOG"
		die "postgres started but does not accept connections on 127.0.0.1:$PG_PORT"
	fi
	pg_ensure_db
	say "postgres $PG_MAJOR on 127.0.0.1:$PG_PORT (data $PGDATA) [$how]"
}

pg_down() {
	if pg_running; then
		pg_stop
		say "postgres $PG_MAJOR on 127.0.0.1:$PM_PORT stopped (data kept in $PGDATA)"
	else
		say "postgres $PG_MAJOR not running (data $PGDATA)"
	fi
}

# ------------------------------------------------------------------ redis ---

# redis_running sets RS_PID and RS_PORT for our live redis-server.
redis_running() {
	local title=""
	RS_PID="" RS_PORT=""
	[[ -f $REDIS_PIDFILE ]] || return 1
	{ read -r RS_PID <"$REDIS_PIDFILE"; } 2>/dev/null || return 1
	proc_is_ours "$RS_PID" redis-server "$REDIS_DIR" || return 1
	# redis sets its title to "<path> 127.0.0.1:<port>"
	{ IFS= read -r -d '' title <"/proc/$RS_PID/cmdline"; } 2>/dev/null || true
	RS_PORT=${title##*:}
	RS_PORT=${RS_PORT%% *}
	[[ $RS_PORT =~ ^[0-9]+$ ]] || RS_PORT=$REDIS_PORT
	return 0
}

redis_ping() { # PORT
	[[ $("$REDIS_CLI" -h 127.0.0.1 -p "$1" ping 2>/dev/null) == PONG ]]
}

# redis_ready_probe: 0 ready, 2 no redis of ours is alive (after a grace
# period for daemonizing), 1 not yet.
redis_ready_probe() {
	if redis_ping "$REDIS_PORT"; then return 0; fi
	now_ms
	if ((NOW_MS - REDIS_START_MS > 1000)) && [[ -z $(find_procs redis-server "$REDIS_DIR") ]]; then
		return 2
	fi
	return 1
}

redis_stop_pid() { # PID PORT
	"$REDIS_CLI" -h 127.0.0.1 -p "$2" shutdown nosave >/dev/null 2>&1 || true
	if ! wait_for 10 pid_dead "$1"; then
		kill -TERM "$1" 2>/dev/null || true
		if ! wait_for 10 pid_dead "$1"; then
			kill -KILL "$1" 2>/dev/null || true
			wait_for 5 pid_dead "$1" || die "redis-server pid $1 does not exit"
		fi
	fi
	rm -f "$REDIS_PIDFILE"
}

redis_up() {
	local how=started pid rc
	if redis_running; then
		if [[ $RS_PORT == "$REDIS_PORT" ]]; then
			if wait_for "$WAIT_SECONDS" redis_ping "$REDIS_PORT"; then
				say "redis on 127.0.0.1:$REDIS_PORT (dir $REDIS_DIR) [reused]"
				return 0
			fi
			if redis_running; then
				log_tail "$REDIS_LOG"
				die "our redis-server (pid $RS_PID) does not answer PING on 127.0.0.1:$REDIS_PORT after ${WAIT_SECONDS}s"
			fi
			how=recovered
		else
			if port_in_use "$REDIS_PORT"; then refuse_foreign redis "$REDIS_PORT" PROLIFERATE_REDIS_PORT; fi
			warn "redis of $STACK_DIR runs on port $RS_PORT, restarting it on $REDIS_PORT"
			redis_stop_pid "$RS_PID" "$RS_PORT"
			how=restarted
		fi
	fi
	if [[ -e $REDIS_PIDFILE ]]; then
		how=recovered
		rm -f "$REDIS_PIDFILE"
	fi
	mkdir -p "$REDIS_DIR"
	# A live redis of ours without a pidfile (pidfile deleted by hand): stop it.
	for pid in $(find_procs redis-server "$REDIS_DIR"); do
		warn "stopping stray redis-server pid $pid running in $REDIS_DIR"
		kill -TERM "$pid" 2>/dev/null || true
		wait_for 10 pid_dead "$pid" || kill -KILL "$pid" 2>/dev/null || true
		how=recovered
	done

	if port_in_use "$REDIS_PORT"; then refuse_foreign redis "$REDIS_PORT" PROLIFERATE_REDIS_PORT; fi

	now_ms
	REDIS_START_MS=$NOW_MS
	# shellcheck disable=SC2094 # redis appends to its log; early errors go there too
	if ! "$REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
		--daemonize yes --databases 1024 --pidfile "$REDIS_PIDFILE" \
		--logfile "$REDIS_LOG" --dir "$REDIS_DIR" </dev/null >>"$REDIS_LOG" 2>&1 9>&-; then
		log_tail "$REDIS_LOG"
		die "redis-server failed to start on 127.0.0.1:$REDIS_PORT"
	fi
	rc=0
	wait_for "$WAIT_SECONDS" redis_ready_probe || rc=$?
	if ((rc != 0)); then
		log_tail "$REDIS_LOG"
		if ((rc == 2)); then die "redis-server exited right after starting on 127.0.0.1:$REDIS_PORT"; fi
		die "redis-server does not answer PING on 127.0.0.1:$REDIS_PORT after ${WAIT_SECONDS}s"
	fi
	say "redis on 127.0.0.1:$REDIS_PORT (dir $REDIS_DIR) [$how]"
}

redis_down() {
	if redis_running; then
		redis_stop_pid "$RS_PID" "$RS_PORT"
		say "redis on 127.0.0.1:$RS_PORT stopped"
	else
		say "redis not running (dir $REDIS_DIR)"
	fi
}

# --------------------------------------------------------------- commands ---

cmd_up() {
	lock_stack
	ensure_installed
	pg_up
	redis_up
}

cmd_down() {
	if [[ ! -d $STACK_DIR ]]; then
		say "nothing to stop: $STACK_DIR does not exist"
		return 0
	fi
	lock_stack
	pg_down
	redis_down
}

cmd_status() {
	local rc=0
	say "profile $PROFILE, state dir $STACK_DIR"
	if [[ -x $PG_BIN/pg_isready ]] && pg_running; then
		if [[ $PM_PORT != "$PG_PORT" ]]; then
			say "postgres $PG_MAJOR: running (pid $PM_PID) on 127.0.0.1:$PM_PORT, but this profile wants port $PG_PORT"
			rc=1
		elif pg_ready "$PG_PORT"; then
			say "postgres $PG_MAJOR: up (pid $PM_PID) on 127.0.0.1:$PG_PORT, data $PGDATA"
		else
			say "postgres $PG_MAJOR: running (pid $PM_PID) but not accepting connections on 127.0.0.1:$PG_PORT"
			rc=1
		fi
	else
		say "postgres $PG_MAJOR: down (port $PG_PORT, data $PGDATA)"
		rc=1
	fi
	if [[ -x $REDIS_CLI ]] && redis_running; then
		if [[ $RS_PORT != "$REDIS_PORT" ]]; then
			say "redis: running (pid $RS_PID) on 127.0.0.1:$RS_PORT, but this profile wants port $REDIS_PORT"
			rc=1
		elif redis_ping "$REDIS_PORT"; then
			say "redis: up (pid $RS_PID) on 127.0.0.1:$REDIS_PORT, dir $REDIS_DIR"
		else
			say "redis: running (pid $RS_PID) but not answering on 127.0.0.1:$REDIS_PORT"
			rc=1
		fi
	else
		say "redis: down (port $REDIS_PORT, dir $REDIS_DIR)"
		rc=1
	fi
	return "$rc"
}

cmd_env() {
	printf "export DATABASE_URL='%s'\n" "$DATABASE_URL"
	printf "export REDIS_URL='%s'\n" "$REDIS_URL"
}

cmd_destroy() {
	if [[ ! -d $STACK_DIR ]]; then
		say "nothing to destroy: $STACK_DIR does not exist"
		return 0
	fi
	if foreign_dir "$STACK_DIR"; then
		die "refusing to remove $STACK_DIR: it was not made by devstack.sh"
	fi
	lock_stack
	pg_down
	redis_down
	# The marker goes last so that a concurrent `up` never sees our dir as foreign.
	# The lock file goes last but one: an `up` waiting on it retries on a new one.
	find "$STACK_DIR" -mindepth 1 -maxdepth 1 ! -name "$MARKER" ! -name "${LOCKFILE##*/}" -exec rm -rf {} +
	rm -f "$LOCKFILE" "$STACK_DIR/$MARKER"
	# Fails only if a concurrent `up` already started over in it: leave that be.
	rmdir "$STACK_DIR" 2>/dev/null || true
	say "removed $STACK_DIR"
}

usage() {
	sed -n '2,17s/^# \{0,1\}//p' "$SELF"
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
env) cmd_env ;;
destroy) cmd_destroy ;;
-h | --help | help) usage ;;
*)
	usage >&2
	exit 2
	;;
esac
