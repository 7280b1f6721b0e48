#!/usr/bin/env bash
# Locust load test against a starscan server on 127.0.0.1 (issue 6). Not a test: measures.
#
#   bench/load.sh                                  # 60 s, 50 users (25 Thrift scanners + 25 _query_plan callers)
#   bench/load.sh --time 20 --users 10 --no-append # quick check
#
# Starts `starscan serve` on free 127.0.0.1 ports with a fresh warehouse holding the demo tables
# (lineitem at --scale, default 0.01 = 60k rows), waits until it plans, runs locust headless for
# --time seconds (bench/locustfile.py), stops the server, then writes locust's CSV files into
# --csv-dir (default bench/load-csv/<date>) and a summary (RPS, p50/p99 per call, failures, server
# peak RSS and CPU) into bench/RESULTS.md. Exits 1 when any request failed (the bar is zero).
#
# The benchmark server's per-user limits are set for a load test from one user: plan_rate_per_user=0
# (no cap; the default 50/s would refuse the plan callers) and max_scanners_per_user=max_scanners=256.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
RUN_TIME=60 USERS=50 SPAWN_RATE=10 SCALE=0.01 APPEND=1 CSV_DIR="" WAREHOUSE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --time) RUN_TIME=$2; shift 2 ;;
    --users) USERS=$2; shift 2 ;;
    --spawn-rate) SPAWN_RATE=$2; shift 2 ;;
    --scale) SCALE=$2; shift 2 ;;
    --csv-dir) CSV_DIR=$2; shift 2 ;;
    --warehouse) WAREHOUSE=$2; shift 2 ;;
    --no-append) APPEND=0; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
if ! "$PY" -c "import locust" 2>/dev/null; then
  echo "error: bench/load.sh needs locust, which $PY does not have: install the benchmarks' extra" \
       "($PY -m pip install -e '.[bench]', after ./quickstart.sh test)" >&2
  exit 2
fi
case "$RUN_TIME" in ''|*[!0-9]*) echo "--time must be whole seconds" >&2; exit 2 ;; esac
[ "$RUN_TIME" -le 3600 ] || { echo "--time at most 3600 s" >&2; exit 2; }
STAMP=$(date -u +%Y%m%d-%H%M%S)
CSV_DIR=${CSV_DIR:-bench/load-csv/$STAMP}
mkdir -p "$CSV_DIR"
WORK=$(mktemp -d /tmp/starscan-load.XXXXXX)
WAREHOUSE=${WAREHOUSE:-$WORK/warehouse}
read -r HTTP_PORT BE_PORT QUERY_PORT < <("$PY" -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
LOAD_AT_START=$(cut -d" " -f1-3 /proc/loadavg)

# Only what is set here configures the server (no starscan.conf, no other STARSCAN_*).
for v in $(env | sed -n 's/^\(STARSCAN_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done
: >"$WORK/empty.conf"
export STARSCAN_CONF="$WORK/empty.conf" STARSCAN_PLAN_RATE_PER_USER=0 STARSCAN_MAX_SCANNERS=256 STARSCAN_MAX_SCANNERS_PER_USER=256
export SPARK_LOCAL_IP=127.0.0.1
.venv/bin/starscan serve --warehouse "$WAREHOUSE" --http-port "$HTTP_PORT" --be-port "$BE_PORT" \
  --query-port "$QUERY_PORT" --bind-host 127.0.0.1 --advertise-host 127.0.0.1 --spark-master 'local[2]' \
  --demo-scale "$SCALE" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
stop_server() {
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
}
trap 'stop_server; rm -rf "$WORK"' EXIT

# Ready when a plan comes back (Spark started, demo written): at most 300 s.
READY=0
for _ in $(seq 1 300); do
  kill -0 "$SERVER_PID" 2>/dev/null || { tail -30 "$WORK/server.log" >&2; echo "server exited" >&2; exit 1; }
  if curl -sf -u root: -X POST "http://127.0.0.1:$HTTP_PORT/api/demo/lineitem/_query_plan" \
       -d '{"sql":"select l_orderkey from demo.lineitem"}' >/dev/null 2>&1; then READY=1; break; fi
  sleep 1
done
[ "$READY" = 1 ] || { tail -30 "$WORK/server.log" >&2; echo "server not ready after 300 s" >&2; exit 1; }

echo "locust: $USERS users, ${RUN_TIME}s against 127.0.0.1:$HTTP_PORT (BE $BE_PORT)" >&2
set +e
timeout $((RUN_TIME + 120)) "$PY" -m locust -f bench/locustfile.py --headless --host "http://127.0.0.1:$HTTP_PORT" \
  --users "$USERS" --spawn-rate "$SPAWN_RATE" --run-time "${RUN_TIME}s" --stop-timeout 30 \
  --csv "$CSV_DIR/locust" --only-summary --loglevel WARNING 2>"$WORK/locust.log"
LOCUST_RC=$?
set -e
tail -5 "$WORK/locust.log" >&2 || true

# The server's peak RSS (VmHWM) and CPU seconds, read before it stops.
"$PY" bench/load_summary.py snapshot "$SERVER_PID" >"$CSV_DIR/server.json"
stop_server
ARGS=(report --csv-dir "$CSV_DIR" --users "$USERS" --time "$RUN_TIME" --spawn-rate "$SPAWN_RATE" --scale "$SCALE"
      --load-at-start "$LOAD_AT_START" --locust-rc "$LOCUST_RC")
[ "$APPEND" = 1 ] || ARGS+=(--no-append)
"$PY" bench/load_summary.py "${ARGS[@]}"
