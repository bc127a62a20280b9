#!/usr/bin/env bash
# W1/W2/W3 of the peer benchmark (../shared/bench/peers from the repository's root, its Vercel Workflow
# peer) on a Workflow DevKit 5.0.0-beta.35 app, on four worlds: the DevKit's local world, the
# DevKit's PostgreSQL world, and @worlds-engine/devkit-world against `worlds serve` on hybrid
# storage and on PostgreSQL. See README.md.
#
#   bench/run.sh setup                  # copy the app to $WORK/app, npm ci, build it for each world
#   bench/run.sh build local|wpostgres|ours   # build the app again for one world (ours: after rebuilding dist/)
#   bench/run.sh local|wpostgres|hybrid|postgres  # one round of W1 W2 W3 on that world
#   bench/run.sh all                    # ROUNDS rounds; each round runs every world of $WORLDS once
#
# The 5.x runtime picks its World when the app is built (the framework aliases
# @workflow/core/runtime/world-target to the package WORKFLOW_TARGET_WORLD names), so there are
# three builds, in $WORK/builds/{local,wpostgres,ours}; hybrid and postgres share `ours`.
#
# Environment (defaults in brackets):
#   PEERS_DIR    the peer benchmark folder; client.mjs and lib/common.mjs are copied from it [<repo>/../shared/bench/peers]
#   WORK         scratch directory [/tmp/devkit-bench]
#   WORLDS_BIN   the worlds binary [<repo>/target/release/worlds]
#   WORLD_MODULE the built World, bundled into the `ours` build [<repo>/clients/devkit-world/dist/index.js]
#   DATABASE_URL for `postgres` (a fresh schema per round) and `wpostgres` (a fresh database per
#                round, created and dropped through this URL) [postgres://postgres@127.0.0.1:5432/test]
#   APP_PORT     the app's port [3310]
#   ROUNDS, WORLDS for `all` [3, "local wpostgres hybrid postgres"]
#   W1_N [200, as in the peer's runs] W1_K W2_N W2_K W3_N W3_SLEEP_S WORKLOAD_TIMEOUT_S WORKLOADS:
#                passed to client.mjs
# Results: one JSON line per workload in $WORK/results/devkit-<world>.jsonl; logs in $WORK/logs/.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
PEERS_DIR="${PEERS_DIR:-$repo/../shared/bench/peers}"
WORK="${WORK:-/tmp/devkit-bench}"
WORLDS_BIN="${WORLDS_BIN:-$repo/target/release/worlds}"
WORLD_MODULE="${WORLD_MODULE:-$repo/clients/devkit-world/dist/index.js}"
DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
APP_PORT="${APP_PORT:-3310}"
export W1_N="${W1_N:-200}"   # the peers' W1 on the DevKit (the client's own default is 1000)
APP="$WORK/app"
BUILDS="$WORK/builds"
mkdir -p "$WORK/results" "$WORK/logs"

pids=()
schema=""
database=""
stop_pid() { # SIGINT (how `worlds serve` stops), SIGTERM after 5 s, SIGKILL after 10 s
    local pid=$1 i=0
    kill -0 "$pid" 2>/dev/null || return 0
    kill -INT "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do
        sleep 0.1; i=$((i + 1))
        [ $i -eq 50 ] && kill -TERM "$pid" 2>/dev/null
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
stop_all() {
    local i
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop_pid "${pids[$i]}"; done
    pids=()
    if [ -n "$schema" ]; then
        psql -w -q "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS \"$schema\" CASCADE" >/dev/null 2>&1 || true
        schema=""
    fi
    if [ -n "$database" ]; then
        psql -w -q "$DATABASE_URL" -c "DROP DATABASE IF EXISTS \"$database\" WITH (FORCE)" >/dev/null 2>&1 || true
        database=""
    fi
}
trap stop_all EXIT

cpu_s() { # PID: user+system CPU seconds used so far
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); printf "%.1f", ($12 + $13) / hz }' "/proc/$1/stat" 2>/dev/null || echo "?"
}

wait_port() { # HOST PORT TIMEOUT_S
    local i=0
    while ! (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; do
        i=$((i + 1)); [ $i -gt $(($3 * 10)) ] && { echo "timeout waiting for $1:$2" >&2; return 1; }
        sleep 0.1
    done
}

# build local|wpostgres|ours: a nitro build of the app for that World, moved to $BUILDS/<name>
# (outside the app: the workflow builder scans the app's folder and would pick up old outputs).
build() {
    local name=$1 target
    case "$name" in
        local) target="" ;;
        wpostgres) target="@workflow/world-postgres" ;;
        ours) target="$WORLD_MODULE"; [ -f "$target" ] || { echo "no $target: build clients/devkit-world first" >&2; return 1; } ;;
        *) echo "build local|wpostgres|ours" >&2; return 2 ;;
    esac
    (cd "$APP" && rm -rf .output node_modules/.nitro &&
        if [ -n "$target" ]; then WORKFLOW_TARGET_WORLD="$target" npx nitro build; else env -u WORKFLOW_TARGET_WORLD npx nitro build; fi)
    rm -rf "$BUILDS/$name"; mkdir -p "$BUILDS"
    mv "$APP/.output" "$BUILDS/$name"
    echo "built $BUILDS/$name (WORKFLOW_TARGET_WORLD=${target:-unset, so @workflow/world-local})"
}

setup() {
    mkdir -p "$APP/server/api" "$APP/workflows" "$WORK/lib"
    cp "$here/package.json" "$here/package-lock.json" "$here/.npmrc" "$here/nitro.config.ts" "$APP/"
    cp "$here/server/api/run.post.ts" "$APP/server/api/"
    cp "$here/workflows/bench.ts" "$APP/workflows/"
    # The peer's client, unchanged; it imports ../lib/common.mjs and reads versions from ./node_modules.
    cp "$PEERS_DIR/vercel/client.mjs" "$APP/"
    cp "$PEERS_DIR/lib/common.mjs" "$WORK/lib/"
    (cd "$APP" && npm ci --no-audit --no-fund)
    build local; build wpostgres; build ours
}

# start_worlds hybrid|postgres LOG: starts a fresh `worlds serve`; sets WORLDS_URL, key, srv_pid.
start_worlds() {
    local mode=$1 log=$2 args=(serve --addr 127.0.0.1:0 --devkit-callback-origin loopback)
    if [ "$mode" = postgres ]; then
        schema="devkit_bench_$(date +%s)_$$"
        args+=(--persistence postgres --database-url "$DATABASE_URL" --schema "$schema")
    else
        args+=(--dir "$(mktemp -d "$WORK/world.XXXXXX")" --persistence hybrid)
    fi
    env -u WORLDS_ENGINE_DIR -u WORLDS_ENGINE_DATABASE_URL WORLDS_DELIVERY_SECRET="$secret" \
        "$WORLDS_BIN" "${args[@]}" >"$log" 2>&1 &
    srv_pid=$!; pids+=("$srv_pid")
    local addr="" i
    for i in $(seq 1 600); do
        kill -0 "$srv_pid" 2>/dev/null || { cat "$log" >&2; return 1; }
        addr="$(sed -n 's|^serving the API of .* on http://\([^ ]*\) (workflows.*|\1|p' "$log" | head -n 1)"
        [ -n "$addr" ] && break
        sleep 0.1
    done
    [ -n "$addr" ] || { echo "worlds serve did not start" >&2; cat "$log" >&2; return 1; }
    key="$(sed -n '/^no API key was set up: created admin key/{n;p;q}' "$log" | tr -d '[:space:]')"
    [ -n "$key" ] || { echo "no admin key printed" >&2; return 1; }
    WORLDS_URL="http://$addr"
}

round() {
    local world=$1 stamp log_dir label
    stamp="$(date -u +%Y%m%dT%H%M%S)"
    log_dir="$WORK/logs/$world-$stamp"; mkdir -p "$log_dir"
    local cwd; cwd="$(mktemp -d "$WORK/cwd.XXXXXX")"   # the local world writes .workflow-data/ here
    local app_env=(HOST=127.0.0.1 PORT="$APP_PORT")
    local rss
    case "$world" in
    local)
        label="world-local $(node -p "require('$APP/node_modules/@workflow/world-local/package.json').version") (files in .workflow-data, in-process queue)"
        (cd "$cwd" && exec env -u WORKFLOW_TARGET_WORLD "${app_env[@]}" \
            node "$BUILDS/local/server/index.mjs" >"$log_dir/app.log" 2>&1) &
        app_pid=$!; pids+=("$app_pid")
        rss="app=$app_pid"
        ;;
    wpostgres)
        database="devkit_wp_$(date +%s)_$$"
        local db_url="${DATABASE_URL%/*}/$database"
        psql -w -q "$DATABASE_URL" -c "CREATE DATABASE \"$database\"" >/dev/null
        (cd "$APP" && WORKFLOW_POSTGRES_URL="$db_url" node node_modules/@workflow/world-postgres/bin/setup.js) \
            >"$log_dir/bootstrap.log" 2>&1 || { cat "$log_dir/bootstrap.log" >&2; return 1; }
        label="world-postgres $(node -p "require('$APP/node_modules/@workflow/world-postgres/package.json').version") (PostgreSQL 15, graphile-worker queue)"
        (cd "$cwd" && exec env "${app_env[@]}" WORKFLOW_TARGET_WORLD=@workflow/world-postgres \
            WORKFLOW_POSTGRES_URL="$db_url" \
            node "$BUILDS/wpostgres/server/index.mjs" >"$log_dir/app.log" 2>&1) &
        app_pid=$!; pids+=("$app_pid")
        rss="app=$app_pid"
        ;;
    hybrid | postgres)
        secret="whsec_$(head -c 32 /dev/urandom | base64 | tr -d '\n')"
        start_worlds "$world" "$log_dir/worlds.log"
        label="worlds-engine $world (@worlds-engine/devkit-world)"
        (cd "$cwd" && exec env "${app_env[@]}" WORKFLOW_TARGET_WORLD="$WORLD_MODULE" \
            WORLDS_URL="$WORLDS_URL" WORLDS_API_KEY="$key" WORLDS_DELIVERY_SECRET="$secret" \
            WORLDS_CALLBACK_URL="http://127.0.0.1:$APP_PORT" \
            node "$BUILDS/ours/server/index.mjs" >"$log_dir/app.log" 2>&1) &
        app_pid=$!; pids+=("$app_pid")
        rss="app=$app_pid,server=$srv_pid"
        ;;
    esac
    wait_port 127.0.0.1 "$APP_PORT" 60
    echo "== $world round $stamp"
    set +e
    (cd "$APP" && VERCEL_WF_URL="http://127.0.0.1:$APP_PORT" STORAGE="$label" \
        BENCH_OUT="$WORK/results/devkit-$world.jsonl" BENCH_RUN_ID="$world-$stamp" BENCH_RSS_PIDS="$rss" \
        timeout 900 node client.mjs ${WORKLOADS:-W1 W2 W3})
    local status=$?
    set -e
    local cpu="app $(cpu_s "$app_pid") s"
    case "$world" in hybrid | postgres) cpu="$cpu, worlds serve $(cpu_s "$srv_pid") s" ;; esac
    echo "CPU time over the round (warm-up, W1-W3): $cpu" | tee "$log_dir/cpu.txt"
    case "$world" in
    hybrid | postgres)
        # Dead-lettered deliveries show up as failed runs of worlds.devkit.deliver.
        curl -s -H "Authorization: Bearer $key" \
            "$WORLDS_URL/v1/runs?workflow=worlds.devkit.deliver&status=failed" >"$log_dir/failed-deliveries.json" || true
        echo "failed deliveries: $(head -c 300 "$log_dir/failed-deliveries.json")"
        ;;
    wpostgres)
        psql -w -q -A -t "${DATABASE_URL%/*}/$database" \
            -c "SELECT status, count(*) FROM workflow.workflow_runs GROUP BY 1" >"$log_dir/runs-by-status.txt" 2>&1 || true
        echo "runs by status: $(tr '\n' ' ' <"$log_dir/runs-by-status.txt")"
        ;;
    esac
    echo "app log lines mentioning errors: $(grep -ci 'error' "$log_dir/app.log" || true) (logs in $log_dir)"
    stop_all
    rm -rf "$cwd"
    return $status
}

case "${1:-}" in
    setup) setup ;;
    build) build "${2:-}" ;;
    local | wpostgres | hybrid | postgres) round "$1" ;;
    all)
        for r in $(seq 1 "${ROUNDS:-3}"); do
            for w in ${WORLDS:-local wpostgres hybrid postgres}; do
                round "$w" || echo "round $r of $w failed (status $?)"
            done
        done
        ;;
    *) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
