#!/usr/bin/env bash
# Benchmark Fibril beside NATS JetStream and RabbitMQ on this machine, in one
# run, with the workload of ../shared/bench-peers (README "The workload,
# exactly").
#
# Starts private instances of nats-server, RabbitMQ and `fibril serve` on
# 127.0.0.1 with throw-away data directories, runs every scenario for every
# system REPS times (sync + 1 s pause between runs), samples each broker's CPU
# and RSS from /proc, stops exactly the processes it started (by PID), and
# prints the raw result lines, one markdown table with the ratios
# fibril/nats-js and fibril/rabbitmq-quorum, and one line per scenario,
# transport and peer:
#
#   ratio scenario=end-to-end system=fibril-quic vs=nats-js value=1.23
#
# (throughput Fibril over peer; for the paced row p99 latency peer over Fibril;
# above 1 favours Fibril; the median over REPS).
#
# The peers are driven by the harness's own Go program, built from
# $FIBRIL_SHARED/bench-peers into the temporary directory; Fibril by
# `fibril bench`, built from this checkout.
#
# Usage: scripts/bench-compare.sh        (defaults below; override with environment variables)
#        REPS=1 MSGS=50000 scripts/bench-compare.sh
#
# Environment (defaults in brackets; the workload ones are the harness's):
#   REPS [2]              repetitions of the whole scenario list
#   MSGS [200000]         messages for confirmed-publish and end-to-end
#   SIZE [1024]           body bytes
#   PRODUCERS [2] CONSUMERS [2] WINDOW [1024] PREFETCH [1024]
#   PACED_RATE [5000] PACED_MSGS [50000]   end-to-end at a fixed publish rate (0 = skip)
#   FANOUT_MSGS [100000] FANOUT_READERS [4] (FANOUT_MSGS=0 skips fanout)
#   FIBRIL_SYSTEMS ["fibril-quic fibril-tcp"]
#   QUEUE_SYSTEMS ["nats-js rabbitmq-quorum rabbitmq-classic"]
#   FANOUT_SYSTEMS ["nats-js rabbitmq-stream"]
#   NATS_PORT [44222] AMQP_PORT [45672] DIST_PORT [45673] EPMD_PORT [45369]
#   FIBRIL_PORT [a free loopback port, TCP and UDP]
#   SCENARIO_TIMEOUT [240]  seconds per system and scenario (hard limit)
#   FIBRIL_SHARED [$(dirname repo)/shared]  where bench-peers lives
#   KEEP=1                keep the temporary directory (logs, data) afterwards
#
# Fibril runs with --reconnect-grace-ms 0, so that a consumer's closed
# connection requeues its unsettled deliveries at once (as closing a RabbitMQ
# channel does) and the `left` probe need not wait out the default 5 s grace.
# The grace only matters after a disconnect; it changes nothing measured.
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$(pwd)
SHARED=${FIBRIL_SHARED:-$(dirname "$REPO")/shared}
PEERS_SRC="$SHARED/bench-peers"

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
FIBRIL_SYSTEMS=${FIBRIL_SYSTEMS:-"fibril-quic fibril-tcp"}
QUEUE_SYSTEMS=${QUEUE_SYSTEMS:-"nats-js rabbitmq-quorum rabbitmq-classic"}
FANOUT_SYSTEMS=${FANOUT_SYSTEMS:-"nats-js rabbitmq-stream"}
NATS_PORT=${NATS_PORT:-44222}
AMQP_PORT=${AMQP_PORT:-45672}
DIST_PORT=${DIST_PORT:-45673}
EPMD_PORT=${EPMD_PORT:-45369}
FIBRIL_PORT=${FIBRIL_PORT:-}
SCENARIO_TIMEOUT=${SCENARIO_TIMEOUT:-240}

log() { echo "[bench-compare $(date +%H:%M:%S)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ -f "$PEERS_SRC/main.go" ] || die "no bench-peers harness at $PEERS_SRC (set FIBRIL_SHARED)"

# ---------------------------------------------------------------- install
# As the harness does: Debian packages, installed without starting their
# system-wide services (a temporary policy-rc.d refuses every start).
install_missing() {
	local need=()
	command -v nats-server >/dev/null 2>&1 || need+=(nats-server)
	[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need+=(rabbitmq-server)
	command -v epmd >/dev/null 2>&1 || need+=(erlang-base)
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

# A port free for TCP and UDP (Fibril serves QUIC on the same port number).
free_port() {
	local p i
	for ((i = 0; i < 100; i++)); do
		p=$((20000 + RANDOM % 40000))
		if ! tcp_port_in_use "$p" && ! udp_port_in_use "$p"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# ---------------------------------------------------------------- servers
WORK=""
NATS_PID=""
EPMD_PID=""
RMQ_PID=""    # the rabbitmq-server foreground script (turns SIGTERM into a clean stop)
BEAM_PID=""   # the Erlang VM it runs (sampled for CPU/RSS)
FIBRIL_PID="" # fibril serve

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
	[ -n "$FIBRIL_PID" ] && { log "stopping fibril (pid $FIBRIL_PID)"; stop_pid "$FIBRIL_PID" fibril 20; }
	if [ -n "$RMQ_PID" ]; then
		log "stopping rabbitmq (pid $RMQ_PID)"
		stop_pid "$RMQ_PID" rabbitmq-server 60
		[ -n "$BEAM_PID" ] && stop_pid "$BEAM_PID" beam.smp 10
	fi
	[ -n "$NATS_PID" ] && { log "stopping nats-server (pid $NATS_PID)"; stop_pid "$NATS_PID" nats-server 20; }
	[ -n "$EPMD_PID" ] && stop_pid "$EPMD_PID" epmd 5
	wait 2>/dev/null
	if [ -n "$WORK" ] && [ -d "$WORK" ]; then
		if [ "${KEEP:-0}" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_nats() {
	mkdir -p "$WORK/nats"
	nats-server -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$WORK/nats/store" -l "$WORK/nats/nats.log" &
	NATS_PID=$!
	log "nats-server pid $NATS_PID on 127.0.0.1:$NATS_PORT"
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
	# a plain command (not through fibril_env) so that $! is fibril's own PID
	XDG_CONFIG_HOME="$f/config" "$FIBRIL" serve --data-dir "$f/data" --listen "127.0.0.1:$FIBRIL_PORT" \
		--reconnect-grace-ms 0 --log-level warn >"$f/serve.log" 2>&1 &
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

for p in "$NATS_PORT" "$AMQP_PORT" "$DIST_PORT" "$EPMD_PORT"; do
	tcp_port_in_use "$p" && die "port $p on 127.0.0.1 is in use; pick others (NATS_PORT, AMQP_PORT, DIST_PORT, EPMD_PORT)"
done
if [ -z "$FIBRIL_PORT" ]; then
	FIBRIL_PORT=$(free_port) || die "no free port for fibril; set FIBRIL_PORT"
elif tcp_port_in_use "$FIBRIL_PORT" || udp_port_in_use "$FIBRIL_PORT"; then
	die "FIBRIL_PORT $FIBRIL_PORT is in use"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fibrilbench.XXXXXX")
log "work dir $WORK"
log "building the peers harness and fibril"
(cd "$PEERS_SRC" && go build -o "$WORK/peers" .)
go build -o "$WORK/fibril-bin" ./cmd/fibril
PEERS="$WORK/peers"
FIBRIL="$WORK/fibril-bin"

start_nats
start_rabbitmq
find_beam || log "could not find the beam.smp PID; server CPU will not be reported for rabbitmq"
start_fibril

NATS_URL="nats://127.0.0.1:$NATS_PORT"
AMQP_URL="amqp://guest:guest@127.0.0.1:$AMQP_PORT/"
PEER_CONN=(-nats-url "$NATS_URL" -amqp-url "$AMQP_URL" -pids "nats=$NATS_PID,rabbitmq=$BEAM_PID")
FIBRIL_CONN=(-addr "127.0.0.1:$FIBRIL_PORT" -pids "fibril=$FIBRIL_PID" -reconnect-grace 0)

log "waiting for the peers"
READY=$(timeout 150 "$PEERS" wait -system nats-js,rabbitmq -nats-url "$NATS_URL" -amqp-url "$AMQP_URL" -timeout 120s) || {
	echo "$READY"
	tail -n 30 "$WORK/rabbitmq/stdout.log" "$WORK/rabbitmq/log/"*.log 2>/dev/null || true
	die "servers did not become ready"
}
NATS_VER=$(echo "$READY" | awk '/system=nats/ {for(i=1;i<=NF;i++) if($i ~ /^version=/) print substr($i,9)}')
RMQ_VER=$(echo "$READY" | awk '/system=rabbitmq/ {for(i=1;i<=NF;i++) if($i ~ /^version=/) print substr($i,9)}')
ERL_VER=$(dpkg-query -W -f='${Version}' erlang-base 2>/dev/null || echo unknown)

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
		out=$(timeout $((SCENARIO_TIMEOUT + 60)) "$PEERS" "$sc" -system "$sys" "${PEER_CONN[@]}" \
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
	for sys in $FIBRIL_SYSTEMS $QUEUE_SYSTEMS; do
		run_one confirmed-publish "$sys" "${COMMON[@]}" -msgs "$MSGS"
	done
	for sys in $FIBRIL_SYSTEMS $QUEUE_SYSTEMS; do
		run_one end-to-end "$sys" "${COMMON[@]}" -msgs "$MSGS" -consumers "$CONSUMERS" -prefetch "$PREFETCH"
	done
	if [ "$PACED_RATE" != 0 ]; then
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
echo "- nats-server $NATS_VER (JetStream, file storage, 1 replica, PubAck before fsync); RabbitMQ $RMQ_VER on Erlang/OTP package $ERL_VER (quorum/classic confirm after fsync)"
echo "- fibril: this checkout, fibril serve defaults except --reconnect-grace-ms 0; confirms after fsync (group commit per partition), one partition per queue; built with $(go version | awk '{print $3}')"
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
