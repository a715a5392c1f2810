#!/usr/bin/env bash
# Benchmark Fibril beside NATS JetStream, RabbitMQ and Redis Streams on this
# machine, in one run, with the workload and the peer set of the reference
# harness ../shared/bench-peers (README "The workload, exactly"; its run.sh
# starts the peers the same way). Everything needed is in this checkout: the
# peers are driven by `fibril bench --system <peer> --url <loopback URL>`
# (package bench/peers, over each peer's own Go client), so a lone clone runs
# it.
#
# Builds nats-server $NATS_VERSION from its Go module once into $CACHE_DIR
# (reused afterwards; the harness's run.sh uses the same cache), installs
# rabbitmq-server and redis-server from Debian if missing (without starting
# their system services), and starts private instances on 127.0.0.1 with
# throw-away data directories: two nats-server processes from one binary
# (nats-js: JetStream's default sync, PubAck without fsync; nats-js-sync:
# `sync_interval: always`, fsync before every PubAck), RabbitMQ (quorum,
# classic and stream queues; the stream queue does not fsync before it
# confirms), redis-server (AOF, `appendfsync always`) and
# `fibril serve`. Only the servers that the selected systems need are
# installed and started; before measuring it checks that each nats-server and
# Redis runs with the durability settings its system is named for. It runs
# every scenario for every system REPS times (sync + 1 s pause between runs),
# samples each broker's CPU and RSS from /proc, stops exactly the processes it
# started (by PID), and prints the environment (versions, verified settings),
# the raw result lines, one markdown table with one ratio column
# fibril/<peer> per peer in the results, and one line per scenario, Fibril
# transport and peer that ran the scenario:
#
#   ratio scenario=end-to-end system=fibril-quic vs=nats-js-sync value=1.23
#
# (throughput Fibril over peer; for the paced row p99 latency peer over Fibril;
# above 1 favours Fibril; the median over REPS). Queue scenarios compare with
# nats-js, nats-js-sync, rabbitmq-quorum, rabbitmq-classic and redis-streams;
# fanout with nats-js, nats-js-sync, rabbitmq-stream and redis-streams.
#
# Every system, Fibril and peers, is driven by one `fibril bench` binary built
# from this checkout into the temporary directory; it also waits for the
# peers (`fibril bench wait`) and prints the table (`fibril bench report`).
#
# Usage: scripts/bench-compare.sh        (defaults below; override with environment variables)
#        REPS=1 MSGS=50000 scripts/bench-compare.sh
#        REPS=1 MSGS=5000 PACED_MSGS=2000 FANOUT_MSGS=5000 scripts/bench-compare.sh   (smoke test)
#        QUEUE_SYSTEMS="nats-js redis-streams" FANOUT_SYSTEMS=redis-streams scripts/bench-compare.sh
#
# Environment (defaults in brackets; the workload and peer ones are the harness's):
#   REPS [2]              repetitions of the whole scenario list
#   MSGS [200000]         messages for confirmed-publish and end-to-end (0 skips both)
#   SIZE [1024]           body bytes
#   PRODUCERS [2] CONSUMERS [2] WINDOW [1024] PREFETCH [1024]
#   PACED_RATE [5000] PACED_MSGS [50000]   end-to-end at a fixed publish rate (either 0 skips it)
#   FANOUT_MSGS [100000] FANOUT_READERS [4] (FANOUT_MSGS=0 skips fanout)
#   FIBRIL_SYSTEMS ["fibril-quic fibril-tcp"]  (set but empty: only the peers run, no fibril serve;
#                         e.g. to check agreement with ../shared/bench-peers/run.sh)
#   QUEUE_SYSTEMS ["nats-js nats-js-sync rabbitmq-quorum rabbitmq-classic redis-streams"]
#   FANOUT_SYSTEMS ["nats-js nats-js-sync rabbitmq-stream redis-streams"]
#   NATS_PORT [44222] NATS_SYNC_PORT [44223] NATS_HTTP_PORT [48222] NATS_SYNC_HTTP_PORT [48223]
#   AMQP_PORT [45672] DIST_PORT [45673] EPMD_PORT [45369] REDIS_PORT [46379]
#   FIBRIL_PORT [a free loopback port, TCP and UDP]
#   NATS_VERSION [2.15.2]  nats-server module version to build
#   CACHE_DIR [${XDG_CACHE_HOME:-$HOME/.cache}/bench-peers]  where the built nats-server is kept
#   NATS_LEGACY=1         use Debian's nats-server (2.9) for nats-js instead; drops nats-js-sync
#   SCENARIO_TIMEOUT [240]  seconds per system and scenario (hard limit)
#   KEEP=1                keep the temporary directory (logs, data) afterwards
#
# Needs Go (this module and nats-server 2.15.2 want >= 1.26) and, for the
# first build of nats-server, the Go module proxy; missing Debian packages
# are installed only as root.
#
# Fibril runs with --reconnect-grace-ms 0, so that a consumer's closed
# connection requeues its unsettled deliveries at once (as closing a RabbitMQ
# channel does) and the `left` probe need not wait out the default 5 s grace.
# The grace only matters after a disconnect; it changes nothing measured.
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$(pwd)

REPS=${REPS:-2}
MSGS=${MSGS:-200000}
SIZE=${SIZE:-1024}
PRODUCERS=${PRODUCERS:-2}
CONSUMERS=${CONSUMERS:-2}
WINDOW=${WINDOW:-1024}
PREFETCH=${PREFETCH:-1024}
PACED_RATE=${PACED_RATE:-5000}
PACED_MSGS=${PACED_MSGS:-50000}
FANOUT_MSGS=${FANOUT_MSGS:-100000}
FANOUT_READERS=${FANOUT_READERS:-4}
FIBRIL_SYSTEMS=${FIBRIL_SYSTEMS-"fibril-quic fibril-tcp"}
QUEUE_SYSTEMS=${QUEUE_SYSTEMS:-"nats-js nats-js-sync rabbitmq-quorum rabbitmq-classic redis-streams"}
FANOUT_SYSTEMS=${FANOUT_SYSTEMS:-"nats-js nats-js-sync rabbitmq-stream redis-streams"}
NATS_PORT=${NATS_PORT:-44222}
NATS_SYNC_PORT=${NATS_SYNC_PORT:-44223}
NATS_HTTP_PORT=${NATS_HTTP_PORT:-48222}
NATS_SYNC_HTTP_PORT=${NATS_SYNC_HTTP_PORT:-48223}
AMQP_PORT=${AMQP_PORT:-45672}
DIST_PORT=${DIST_PORT:-45673}
EPMD_PORT=${EPMD_PORT:-45369}
REDIS_PORT=${REDIS_PORT:-46379}
FIBRIL_PORT=${FIBRIL_PORT:-}
NATS_VERSION=${NATS_VERSION:-2.15.2}
NATS_VERSION=${NATS_VERSION#v}
CACHE_DIR=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/bench-peers}
NATS_LEGACY=${NATS_LEGACY:-0}
SCENARIO_TIMEOUT=${SCENARIO_TIMEOUT:-240}

log() { echo "[bench-compare $(date +%H:%M:%S)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- systems
without() { # word list... -> the list without word
	local w=$1 x out=()
	shift
	for x in "$@"; do [ "$x" = "$w" ] || out+=("$x"); done
	echo "${out[*]}"
}

if [ "$NATS_LEGACY" = 1 ]; then
	case " $QUEUE_SYSTEMS $FANOUT_SYSTEMS " in
	*" nats-js-sync "*) log "NATS_LEGACY=1: dropping nats-js-sync (nats-server 2.9 has no sync_interval setting)" ;;
	esac
	QUEUE_SYSTEMS=$(without nats-js-sync $QUEUE_SYSTEMS)
	FANOUT_SYSTEMS=$(without nats-js-sync $FANOUT_SYSTEMS)
fi
for sys in $FIBRIL_SYSTEMS; do
	case $sys in
	fibril-quic | fibril-tcp) ;;
	*) die "unknown Fibril system '$sys' (known: fibril-quic fibril-tcp)" ;;
	esac
done
NEED_NATS=0 NEED_NATS_SYNC=0 NEED_RMQ=0 NEED_REDIS=0
for sys in $QUEUE_SYSTEMS $FANOUT_SYSTEMS; do
	case $sys in
	nats-js) NEED_NATS=1 ;;
	nats-js-sync) NEED_NATS_SYNC=1 ;;
	rabbitmq-quorum | rabbitmq-classic | rabbitmq-stream) NEED_RMQ=1 ;;
	redis-streams) NEED_REDIS=1 ;;
	*) die "unknown system '$sys' (known: nats-js nats-js-sync rabbitmq-quorum rabbitmq-classic rabbitmq-stream redis-streams)" ;;
	esac
done

# ---------------------------------------------------------------- install
# As the harness does: Debian packages, only those the selected systems need,
# installed without starting their system-wide services (a temporary
# policy-rc.d refuses every start).
install_missing() {
	local need=()
	if [ "$NATS_LEGACY" = 1 ] && [ $NEED_NATS = 1 ]; then
		command -v nats-server >/dev/null 2>&1 || need+=(nats-server)
	fi
	if [ $NEED_RMQ = 1 ]; then
		[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need+=(rabbitmq-server)
		command -v epmd >/dev/null 2>&1 || need+=(erlang-base)
	fi
	if [ $NEED_REDIS = 1 ]; then
		command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
	fi
	[ ${#need[@]} -eq 0 ] && return 0
	[ "$(id -u)" = 0 ] || die "missing ${need[*]}; run as root or install them first"
	log "installing ${need[*]} from Debian"
	local made_policy=0
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		made_policy=1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	[ $made_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
	return 0
}

tcp_port_in_use() { # port
	if command -v ss >/dev/null 2>&1; then
		[ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]
	else
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
	fi
}

udp_port_in_use() { # port; without ss we cannot tell, and say free
	command -v ss >/dev/null 2>&1 && [ -n "$(ss -Hlun "sport = :$1" 2>/dev/null)" ]
}

# A port free for TCP and UDP (Fibril serves QUIC on the same port number),
# and none of the peers' ports (in PORTS).
free_port() {
	local p i
	for ((i = 0; i < 100; i++)); do
		p=$((20000 + RANDOM % 40000))
		case " ${PORTS[*]} " in *" $p "*) continue ;; esac
		if ! tcp_port_in_use "$p" && ! udp_port_in_use "$p"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# ---------------------------------------------------------------- nats-server build
NATS_BIN=""
BUILD_TMP=""

# Builds github.com/nats-io/nats-server/v2@v$NATS_VERSION once into
# $CACHE_DIR/bin/nats-server-v$NATS_VERSION and reuses it afterwards if it
# reports that version.
build_nats() {
	NATS_BIN="$CACHE_DIR/bin/nats-server-v$NATS_VERSION"
	if [ -x "$NATS_BIN" ] && [ "$("$NATS_BIN" --version 2>/dev/null)" = "nats-server: v$NATS_VERSION" ]; then
		log "using cached $NATS_BIN"
		return 0
	fi
	log "building nats-server v$NATS_VERSION from its Go module into $CACHE_DIR/bin (once)"
	mkdir -p "$CACHE_DIR/bin"
	BUILD_TMP=$(mktemp -d "$CACHE_DIR/bin/.build.XXXXXX")
	(cd "$BUILD_TMP" && GOBIN="$BUILD_TMP" go install "github.com/nats-io/nats-server/v2@v$NATS_VERSION") ||
		die "building nats-server v$NATS_VERSION failed"
	[ "$("$BUILD_TMP/nats-server" --version 2>/dev/null)" = "nats-server: v$NATS_VERSION" ] ||
		die "the built nats-server does not report v$NATS_VERSION"
	mv -f "$BUILD_TMP/nats-server" "$NATS_BIN"
	rm -rf "$BUILD_TMP"
	BUILD_TMP=""
}

# ---------------------------------------------------------------- servers
WORK=""
NATS_PID=""      # nats-js: JetStream's default sync
NATS_SYNC_PID="" # nats-js-sync: sync_interval: always
REDIS_PID=""
EPMD_PID=""
RMQ_PID=""    # the rabbitmq-server foreground script (turns SIGTERM into a clean stop)
BEAM_PID=""   # the Erlang VM it runs (sampled for CPU/RSS)
FIBRIL_PID="" # fibril serve
WAITER=""     # fibril bench wait

stop_pid() { # pid name seconds: TERM, then KILL of that same PID after the timeout
	local pid=$1 name=$2 secs=$3 i
	[ -n "$pid" ] || return 0
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < secs * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	log "$name (pid $pid) did not stop in ${secs}s; sending KILL"
	kill -KILL "$pid" 2>/dev/null || true
}

cleanup() {
	set +e
	[ -n "$WAITER" ] && stop_pid "$WAITER" "fibril bench wait" 5
	[ -n "$FIBRIL_PID" ] && { log "stopping fibril (pid $FIBRIL_PID)"; stop_pid "$FIBRIL_PID" fibril 20; }
	if [ -n "$RMQ_PID" ]; then
		log "stopping rabbitmq (pid $RMQ_PID)"
		stop_pid "$RMQ_PID" rabbitmq-server 60
		[ -n "$BEAM_PID" ] && stop_pid "$BEAM_PID" beam.smp 10
	fi
	[ -n "$NATS_PID" ] && { log "stopping nats-server (pid $NATS_PID)"; stop_pid "$NATS_PID" nats-server 20; }
	[ -n "$NATS_SYNC_PID" ] && { log "stopping nats-server sync (pid $NATS_SYNC_PID)"; stop_pid "$NATS_SYNC_PID" nats-server 20; }
	[ -n "$REDIS_PID" ] && { log "stopping redis-server (pid $REDIS_PID)"; stop_pid "$REDIS_PID" redis-server 30; }
	[ -n "$EPMD_PID" ] && stop_pid "$EPMD_PID" epmd 5
	wait 2>/dev/null
	[ -n "$BUILD_TMP" ] && rm -rf "$BUILD_TMP"
	if [ -n "$WORK" ] && [ -d "$WORK" ]; then
		if [ "${KEEP:-0}" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_nats DIR PORT HTTP_PORT SYNC: one nats-server with JetStream (file
# store under DIR), client port and monitoring port on 127.0.0.1 only; SYNC=1
# adds "sync_interval: always" (fsync before every PubAck). Sets STARTED_PID.
start_nats() {
	local d=$1 port=$2 http=$3 sync=$4
	mkdir -p "$d/store"
	{
		echo "listen: 127.0.0.1:$port"
		echo "http: 127.0.0.1:$http"
		echo "log_file: \"$d/nats.log\""
		echo "jetstream {"
		echo "  store_dir: \"$d/store\""
		if [ "$sync" = 1 ]; then echo "  sync_interval: always"; fi
		echo "}"
	} >"$d/nats.conf"
	"$NATS_BIN" -c "$d/nats.conf" >"$d/stdout.log" 2>&1 &
	STARTED_PID=$!
	log "nats-server pid $STARTED_PID on 127.0.0.1:$port (monitoring $http, config $d/nats.conf)"
}

# JetStream sync settings as the running server reports them on /varz (plain
# HTTP/1.0 over bash's /dev/tcp, loopback only): "sync_interval=NS sync_always=BOOL".
nats_sync_settings() { # http_port
	local body iv al
	body=$(timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET /varz HTTP/1.0\r\n\r\n" >&3 && cat <&3' _ "$1" 2>/dev/null) || true
	iv=$(printf '%s' "$body" | grep -o '"sync_interval": *[0-9]*' | grep -o '[0-9]*$' || true)
	al=$(printf '%s' "$body" | grep -o '"sync_always": *true' | grep -o 'true$' || true)
	echo "sync_interval=${iv:-n/a}${iv:+ns} sync_always=${al:-false}"
}

start_redis() {
	local d="$WORK/redis"
	mkdir -p "$d/data"
	# AOF persistence with an fsync before every reply to a write command;
	# no RDB snapshots (the AOF is the persistence); everything else default
	cat >"$d/redis.conf" <<CONF
bind 127.0.0.1
port $REDIS_PORT
protected-mode yes
daemonize no
logfile "$d/redis.log"
dir "$d/data"
save ""
appendonly yes
appendfsync always
CONF
	redis-server "$d/redis.conf" >"$d/stdout.log" 2>&1 &
	REDIS_PID=$!
	log "redis-server pid $REDIS_PID on 127.0.0.1:$REDIS_PORT (config $d/redis.conf)"
}

start_rabbitmq() {
	local r="$WORK/rabbitmq"
	mkdir -p "$r/mnesia" "$r/log" "$r/home"
	cat >"$r/rabbitmq.conf" <<EOF
listeners.tcp.default = 127.0.0.1:$AMQP_PORT
loopback_users.guest = true
log.console = false
log.file.level = info
EOF
	echo '[].' >"$r/enabled_plugins"
	: >"$r/rabbitmq-env.conf"
	# our own epmd, loopback only, in the foreground so that we own its PID
	epmd -address 127.0.0.1 -port "$EPMD_PORT" >"$r/epmd.log" 2>&1 &
	EPMD_PID=$!
	sleep 0.5
	env HOME="$r/home" \
		RABBITMQ_CONF_ENV_FILE="$r/rabbitmq-env.conf" \
		RABBITMQ_CONFIG_FILE="$r/rabbitmq.conf" \
		RABBITMQ_ADVANCED_CONFIG_FILE="$r/advanced.config" \
		RABBITMQ_ENABLED_PLUGINS_FILE="$r/enabled_plugins" \
		RABBITMQ_MNESIA_BASE="$r/mnesia" \
		RABBITMQ_LOG_BASE="$r/log" \
		RABBITMQ_PID_FILE="$r/rabbitmq.pid" \
		RABBITMQ_NODENAME="fibrilbench@localhost" \
		RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
		RABBITMQ_NODE_PORT="$AMQP_PORT" \
		RABBITMQ_DIST_PORT="$DIST_PORT" \
		ERL_EPMD_PORT="$EPMD_PORT" \
		ERL_EPMD_ADDRESS=127.0.0.1 \
		RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
		/usr/lib/rabbitmq/bin/rabbitmq-server >"$r/stdout.log" 2>&1 &
	RMQ_PID=$!
	log "rabbitmq-server pid $RMQ_PID on 127.0.0.1:$AMQP_PORT (dist $DIST_PORT, epmd pid $EPMD_PID on $EPMD_PORT)"
}

find_beam() { # the child of the foreground script is the Erlang VM
	local i c
	for ((i = 0; i < 100; i++)); do
		c=$(cat "/proc/$RMQ_PID/task/$RMQ_PID/children" 2>/dev/null | awk '{print $1}')
		if [ -n "$c" ] && [ "$(cat "/proc/$c/comm" 2>/dev/null)" = beam.smp ]; then
			BEAM_PID=$c
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# The broker's local trust file and the bench client's lookup of it both go
# through the user config directory: point it into the temporary directory.
fibril_env() { env XDG_CONFIG_HOME="$WORK/fibril/config" "$@"; }

start_fibril() {
	local f="$WORK/fibril" i
	mkdir -p "$f/config"
	# a plain command (not through fibril_env) so that $! is fibril's own PID;
	# the admin listener stays on (as in production) on a free port of the
	# script's choosing (so a broker already on 8081 does not stop the run):
	# fibril bench deletes each run's queue through it afterwards, as the
	# peers' drivers delete their queues and streams
	XDG_CONFIG_HOME="$f/config" "$FIBRIL" serve --data-dir "$f/data" --listen "127.0.0.1:$FIBRIL_PORT" \
		--reconnect-grace-ms 0 --admin-listen "127.0.0.1:$FIBRIL_ADMIN_PORT" --log-level warn >"$f/serve.log" 2>&1 &
	FIBRIL_PID=$!
	log "fibril serve pid $FIBRIL_PID on 127.0.0.1:$FIBRIL_PORT (TCP and QUIC)"
	# QUIC starts listening after TCP; the trust file appears before either, so
	# wait for both sockets.
	for ((i = 0; i < 200; i++)); do
		kill -0 "$FIBRIL_PID" 2>/dev/null || { cat "$f/serve.log" >&2; die "fibril serve exited"; }
		if tcp_port_in_use "$FIBRIL_PORT" && { ! command -v ss >/dev/null 2>&1 || udp_port_in_use "$FIBRIL_PORT"; }; then
			return 0
		fi
		sleep 0.1
	done
	die "fibril serve did not listen within 20 s"
}

# ---------------------------------------------------------------- main
install_missing
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="$PATH:/usr/local/go/bin"
fi
command -v go >/dev/null 2>&1 || die "go not found"

PORTS=()
[ $NEED_NATS = 1 ] && PORTS+=("$NATS_PORT" "$NATS_HTTP_PORT")
[ $NEED_NATS_SYNC = 1 ] && PORTS+=("$NATS_SYNC_PORT" "$NATS_SYNC_HTTP_PORT")
[ $NEED_RMQ = 1 ] && PORTS+=("$AMQP_PORT" "$DIST_PORT" "$EPMD_PORT")
[ $NEED_REDIS = 1 ] && PORTS+=("$REDIS_PORT")
for p in "${PORTS[@]}"; do
	tcp_port_in_use "$p" && die "port $p on 127.0.0.1 is in use; pick others (NATS_PORT, NATS_SYNC_PORT, NATS_HTTP_PORT, NATS_SYNC_HTTP_PORT, AMQP_PORT, DIST_PORT, EPMD_PORT, REDIS_PORT)"
done
if [ -z "$FIBRIL_SYSTEMS" ]; then
	: # no Fibril system: no port, no fibril serve
elif [ -z "$FIBRIL_PORT" ]; then
	FIBRIL_PORT=$(free_port) || die "no free port for fibril; set FIBRIL_PORT"
elif tcp_port_in_use "$FIBRIL_PORT" || udp_port_in_use "$FIBRIL_PORT"; then
	die "FIBRIL_PORT $FIBRIL_PORT is in use"
fi
if [ -n "$FIBRIL_SYSTEMS" ]; then
	PORTS+=("$FIBRIL_PORT")
	FIBRIL_ADMIN_PORT=$(free_port) || die "no free port for fibril's admin listener"
fi

if [ $NEED_NATS = 1 ] || [ $NEED_NATS_SYNC = 1 ]; then
	if [ "$NATS_LEGACY" = 1 ]; then
		NATS_BIN=$(command -v nats-server) || die "nats-server not found"
		log "NATS_LEGACY=1: using $NATS_BIN"
	else
		build_nats
	fi
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fibrilbench.XXXXXX")
log "work dir $WORK"
log "building fibril (broker and bench client for every system)"
go build -o "$WORK/fibril-bin" ./cmd/fibril
FIBRIL="$WORK/fibril-bin"

WAIT_SYSTEMS=()
if [ $NEED_NATS = 1 ]; then
	start_nats "$WORK/nats" "$NATS_PORT" "$NATS_HTTP_PORT" 0
	NATS_PID=$STARTED_PID
	WAIT_SYSTEMS+=(nats-js)
fi
if [ $NEED_NATS_SYNC = 1 ]; then
	start_nats "$WORK/nats-sync" "$NATS_SYNC_PORT" "$NATS_SYNC_HTTP_PORT" 1
	NATS_SYNC_PID=$STARTED_PID
	WAIT_SYSTEMS+=(nats-js-sync)
fi
if [ $NEED_RMQ = 1 ]; then
	start_rabbitmq
	find_beam || log "could not find the beam.smp PID; server CPU will not be reported for rabbitmq"
	WAIT_SYSTEMS+=(rabbitmq-quorum)
fi
if [ $NEED_REDIS = 1 ]; then
	start_redis
	WAIT_SYSTEMS+=(redis-streams)
fi
[ -n "$FIBRIL_SYSTEMS" ] && start_fibril

# each peer's loopback URL; `fibril bench` samples the server whose -pids key
# belongs to the system it runs (nats, nats-sync, rabbitmq, redis)
NATS_URL="nats://127.0.0.1:$NATS_PORT"
NATS_SYNC_URL="nats://127.0.0.1:$NATS_SYNC_PORT"
AMQP_URL="amqp://guest:guest@127.0.0.1:$AMQP_PORT/"
REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
peer_url() { # system -> its server's URL
	case $1 in
	nats-js) echo "$NATS_URL" ;;
	nats-js-sync) echo "$NATS_SYNC_URL" ;;
	rabbitmq-*) echo "$AMQP_URL" ;;
	redis-streams) echo "$REDIS_URL" ;;
	esac
}
PEER_PIDS="nats=$NATS_PID,nats-sync=$NATS_SYNC_PID,rabbitmq=$BEAM_PID,redis=$REDIS_PID"
FIBRIL_CONN=(-addr "127.0.0.1:$FIBRIL_PORT" -admin-addr "127.0.0.1:$FIBRIL_ADMIN_PORT" -pids "fibril=$FIBRIL_PID" -reconnect-grace 0)

READY=""
if [ ${#WAIT_SYSTEMS[@]} -gt 0 ]; then
	log "waiting for the peers (${WAIT_SYSTEMS[*]})"
	WAIT_ARGS=()
	for sys in "${WAIT_SYSTEMS[@]}"; do WAIT_ARGS+=("$sys=$(peer_url "$sys")"); done
	"$FIBRIL" bench wait -timeout 120s "${WAIT_ARGS[@]}" >"$WORK/ready.txt" &
	WAITER=$!
	DEAD=""
	while kill -0 "$WAITER" 2>/dev/null; do # give up at once if a server exits while we wait
		for pid in $NATS_PID $NATS_SYNC_PID $RMQ_PID $REDIS_PID $FIBRIL_PID; do
			kill -0 "$pid" 2>/dev/null || DEAD="$DEAD $pid"
		done
		[ -n "$DEAD" ] && break
		sleep 0.5
	done
	[ -n "$DEAD" ] && stop_pid "$WAITER" "fibril bench wait" 5
	WAIT_RC=0
	wait "$WAITER" || WAIT_RC=$?
	WAITER=""
	READY=$(cat "$WORK/ready.txt")
	if [ -n "$DEAD" ] || [ "$WAIT_RC" != 0 ]; then
		echo "$READY"
		tail -n 30 "$WORK/rabbitmq/stdout.log" "$WORK/rabbitmq/log/"*.log "$WORK"/nats*/nats.log \
			"$WORK"/nats*/stdout.log "$WORK/redis/redis.log" "$WORK/fibril/serve.log" 2>/dev/null || true
		[ -n "$DEAD" ] && die "server process(es)$DEAD exited during startup (see the logs above; a port taken after the free-port check shows as 'address already in use')"
		die "servers did not become ready"
	fi
fi
field() { # system key: one value from the wait output
	echo "$READY" | awk -v s="system=$1" -v k="$2=" '$1 == s {for (i = 2; i <= NF; i++) if (index($i, k) == 1) print substr($i, length(k) + 1)}'
}
NATS_VER=$(field nats-js version)
NATS_SYNC_VER=$(field nats-js-sync version)
RMQ_VER=$(field rabbitmq-quorum version)
REDIS_VER=$(field redis-streams version)
ERL_VER=$(dpkg-query -W -f='${Version}' erlang-base 2>/dev/null || echo unknown)

# check that each server really runs with the durability settings its system
# is named for
NATS_CFG="" NATS_SYNC_CFG="" REDIS_CFG=""
if [ $NEED_NATS = 1 ]; then
	NATS_CFG=$(nats_sync_settings "$NATS_HTTP_PORT")
	log "nats-js server reports $NATS_CFG"
	case $NATS_CFG in *sync_always=true*) die "the nats-js server unexpectedly runs with sync_always" ;; esac
fi
if [ $NEED_NATS_SYNC = 1 ]; then
	NATS_SYNC_CFG=$(nats_sync_settings "$NATS_SYNC_HTTP_PORT")
	log "nats-js-sync server reports $NATS_SYNC_CFG"
	case $NATS_SYNC_CFG in *sync_always=true*) ;; *) die "the nats-js-sync server does not report sync_always=true" ;; esac
fi
if [ $NEED_REDIS = 1 ]; then
	REDIS_CFG="appendonly=$(field redis-streams appendonly) appendfsync=$(field redis-streams appendfsync) save=$(field redis-streams save)"
	log "redis-server reports $REDIS_CFG"
	[ "$(field redis-streams appendonly)" = yes ] && [ "$(field redis-streams appendfsync)" = always ] ||
		die "redis-server does not run with appendonly yes / appendfsync always"
fi

# machine facts (no paths)
ROOTDEV=$(findmnt -no SOURCE --target "$WORK" 2>/dev/null | sed 's|/dev/||; s|[0-9]*$||' || true)
ROTA=$(cat "/sys/block/$ROOTDEV/queue/rotational" 2>/dev/null || echo "?")
FSTYPE=$(findmnt -no FSTYPE --target "$WORK" 2>/dev/null || echo "?")
MEM=$(free -g | awk '/^Mem:/ {print $2 " GiB"}')
CPU=$(awk -F: '/model name/ {gsub(/^ +/, "", $2); print $2; exit}' /proc/cpuinfo)
DSYNC=$(dd if=/dev/zero of="$WORK/dsync.probe" bs=4k count=500 oflag=dsync 2>&1 |
	awk '/copied/ {s = $(NF-3); if (s > 0) printf "%.3f s (about %.0f synchronous writes/s)", s, 500 / s}' || true)
rm -f "$WORK/dsync.probe"

RESULTS="$WORK/results.txt"
: >"$RESULTS"
# the machine may be shared: record how busy it was around the measurement
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

run_one() { # scenario system extra-args...
	local sc=$1 sys=$2
	shift 2
	sync
	sleep 1
	log "$sc $sys $*"
	local out rc=0
	case "$sys" in
	fibril-*)
		out=$(fibril_env timeout $((SCENARIO_TIMEOUT + 60)) "$FIBRIL" bench "$sc" -transport "${sys#fibril-}" \
			"${FIBRIL_CONN[@]}" -timeout "${SCENARIO_TIMEOUT}s" "$@") || rc=$?
		;;
	*)
		out=$(timeout $((SCENARIO_TIMEOUT + 60)) "$FIBRIL" bench "$sc" -system "$sys" -url "$(peer_url "$sys")" -pids "$PEER_PIDS" \
			-timeout "${SCENARIO_TIMEOUT}s" "$@") || rc=$?
		;;
	esac
	if [ -z "$out" ]; then
		out="system=$sys scenario=$sc status=error err=\"exit $rc, no output\""
	fi
	echo "$out" | tee -a "$RESULTS"
}

for ((rep = 1; rep <= REPS; rep++)); do
	COMMON=(-run "$rep" -size "$SIZE" -producers "$PRODUCERS" -window "$WINDOW")
	if [ "$MSGS" != 0 ]; then
		for sys in $FIBRIL_SYSTEMS $QUEUE_SYSTEMS; do
			run_one confirmed-publish "$sys" "${COMMON[@]}" -msgs "$MSGS"
		done
		for sys in $FIBRIL_SYSTEMS $QUEUE_SYSTEMS; do
			run_one end-to-end "$sys" "${COMMON[@]}" -msgs "$MSGS" -consumers "$CONSUMERS" -prefetch "$PREFETCH"
		done
	fi
	if [ "$PACED_RATE" != 0 ] && [ "$PACED_MSGS" != 0 ]; then
		for sys in $FIBRIL_SYSTEMS $QUEUE_SYSTEMS; do
			run_one end-to-end "$sys" "${COMMON[@]}" -msgs "$PACED_MSGS" -consumers "$CONSUMERS" \
				-prefetch "$PREFETCH" -rate "$PACED_RATE"
		done
	fi
	if [ "$FANOUT_MSGS" != 0 ]; then
		for sys in $FIBRIL_SYSTEMS $FANOUT_SYSTEMS; do
			run_one fanout "$sys" "${COMMON[@]}" -msgs "$FANOUT_MSGS" -consumers "$FANOUT_READERS" -prefetch "$PREFETCH"
		done
	fi
done

# ---------------------------------------------------------------- report
echo
echo "## Fibril beside the peer brokers"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "- machine: $(nproc) cores ($CPU), $MEM RAM, data on $FSTYPE (block device rotational=$ROTA), kernel $(uname -r)"
echo "- 500 x 4 KiB O_DSYNC writes: ${DSYNC:-n/a}"
echo "- load average (1/5/15 min) before the runs: $LOAD_START; after: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ $NEED_NATS = 1 ] || [ $NEED_NATS_SYNC = 1 ]; then
	if [ "$NATS_LEGACY" = 1 ]; then
		NATS_SRC="Debian package $(dpkg-query -W -f='${Version}' nats-server 2>/dev/null || echo '?')"
	else
		NATS_SRC="built from github.com/nats-io/nats-server/v2@v$NATS_VERSION with $(go version "$NATS_BIN" 2>/dev/null | awk '{print $2}')"
	fi
	if [ $NEED_NATS = 1 ]; then
		echo "- nats-js: nats-server $NATS_VER ($NATS_SRC), JetStream file storage, 1 replica, default sync ($NATS_CFG): PubAck without fsync"
	fi
	if [ $NEED_NATS_SYNC = 1 ]; then
		echo "- nats-js-sync: nats-server $NATS_SYNC_VER (same binary, own process and store), JetStream file storage, 1 replica, \`sync_interval: always\` ($NATS_SYNC_CFG): fsync before every PubAck"
	fi
fi
if [ $NEED_RMQ = 1 ]; then
	echo "- rabbitmq-*: RabbitMQ $RMQ_VER on Erlang/OTP package $ERL_VER, no plugins (quorum and classic confirm after fsync; the stream queue of fanout confirms after the write, without fsync)"
fi
if [ $NEED_REDIS = 1 ]; then
	AOF_REWRITES=$(grep -c 'Background append only file rewriting started' "$WORK/redis/redis.log" 2>/dev/null || true)
	echo "- redis-streams: redis-server $REDIS_VER (Debian package $(dpkg-query -W -f='${Version}' redis-server 2>/dev/null || echo '?')), $REDIS_CFG: XADD reply after the AOF write+fdatasync of its event-loop iteration; automatic AOF rewrites during the run: ${AOF_REWRITES:-?}"
fi
[ -n "$FIBRIL_SYSTEMS" ] && echo "- fibril: this checkout, fibril serve defaults except --reconnect-grace-ms 0; confirms after fsync (group commit per partition), one partition per queue; built with $(go version | awk '{print $3}')"
echo "- systems: $FIBRIL_SYSTEMS; queue scenarios: $QUEUE_SYSTEMS; fanout: $FANOUT_SYSTEMS"
echo "- workload: size=$SIZE B, producers=$PRODUCERS, window=$WINDOW/producer, consumers=$CONSUMERS, prefetch=$PREFETCH, msgs=$MSGS (paced: $PACED_MSGS at $PACED_RATE msg/s), fanout: $FANOUT_MSGS msgs x $FANOUT_READERS readers; reps=$REPS"
echo
echo "### Raw result lines"
echo
echo '```'
cat "$RESULTS"
echo '```'
echo
echo "### Table"
echo
"$FIBRIL" bench report "$RESULTS"
