#!/usr/bin/env bash
# Renders docs/grafana/example.png: the Grafana dashboard
# (docs/grafana/stallscope-canary.json) as it looks over a few minutes of
# real canaries. It is not a Grafana screenshot (there is no Grafana here):
# every panel's own query runs against a real Prometheus scraping real
# `stallscope watch` canaries, and render.py draws the answers in the
# dashboard's layout.
#
# The canaries, each on loopback with its own --site, database and
# /metrics port, a round every 2 s (the probe canary every 3 s):
#   office    --scenario healthy            the baseline
#   vpn-exit  --scenario ping-flood-stall   keep-alives hide a hung model; data-stall timer, retry
#   branch    --scenario crawl              a crawling answer; throughput floor (min_rate), partial
#   colo      --scenario dead-primary       primary refuses connections; failover to the fallback
#   lab       --probe                       three routes served by `stallscope sim`: `primary`
#             (healthy), `bigctx` (answers a tiny prompt, stalls on the realistic payload)
#             and `flaky` (healthy, but its simulator is stopped for the middle third of the run)
# Prometheus (the Debian package) scrapes them every second with
# docs/prometheus/alerts.yml loaded; render.py then queries
# /api/v1/query_range over the run, with $site and $provider as ".*" and
# $__rate_interval as 30s.
#
# Needs: the Debian `prometheus` package, python3 with venv (matplotlib is
# installed into ~/.cache/stallscope-render/venv when missing), cargo.
# Usage: docs/grafana/render.sh [path/to/stallscope]   (default: target/debug/stallscope,
#        built when missing). RENDER_SECONDS=N scrapes for N seconds (default 240);
#        RENDER_TSDB=DIR keeps Prometheus's data in DIR, to run render.py on it again.
# Takes about RENDER_SECONDS + 30 s; leaves nothing running.
set -euo pipefail
cd "$(dirname "$0")/../.."
app=${1:-target/debug/stallscope}
seconds=${RENDER_SECONDS:-240}
out=docs/grafana/example.png
command -v prometheus >/dev/null || { echo "needs prometheus: apt-get install prometheus" >&2; exit 1; }
[ -x "$app" ] || cargo build
app=$(realpath "$app")
venv=${XDG_CACHE_HOME:-$HOME/.cache}/stallscope-render/venv
if ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q matplotlib
fi

scratch=$(mktemp -d)
pids=()
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$scratch"
}
trap stop EXIT
trap 'exit 130' INT TERM
# Sleeps in the background, so that a signal ends the script (and `stop`
# runs) at once.
pause() { sleep "$1" & wait $!; }
mkdir -p "$scratch/home"
# A fresh home: no config, no history of the user's is read or written.
# (exec, so that $! of `fresh … &` is the program's own pid.)
fresh() { exec env -i PATH="$PATH" HOME="$scratch/home" "$@"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { # port pid: until something listens on port, while pid lives
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "process $2 exited before listening on $1" >&2; return 1; }
    sleep 0.1
  done
  echo "nothing listens on $1" >&2; return 1
}
started=""    # the last started process's pid
# start LOG command...: runs it in the background, its output in $scratch/LOG.log
start() { local log=$1; shift; fresh "$@" >"$scratch/$log.log" 2>&1 & started=$!; pids+=("$started"); }

# The probe canary's routes: three simulators.
cat >"$scratch/bigctx.toml" <<'EOF'
# Answers a tiny prompt; a request of 4000 bytes or more gets its headers
# and opening event, then silence.
[[attempts]]
steps = [{ content = "tok ", count = 10, every_ms = 25 }]

[large_requests]
from_bytes = 4000

[[large_requests.attempts]]
steps = [{ preamble = true }, { stall_ms = "forever" }]
EOF
primary_port=$(free_port); bigctx_port=$(free_port); flaky_port=$(free_port)
start sim-primary "$app" sim --scenario healthy --port "$primary_port"; wait_port "$primary_port" "$started"
start sim-bigctx "$app" sim --scenario-file "$scratch/bigctx.toml" --port "$bigctx_port"; wait_port "$bigctx_port" "$started"
start sim-flaky "$app" sim --scenario healthy --port "$flaky_port"; wait_port "$flaky_port" "$started"
flaky=$started
route() { printf '[[provider]]\nname = "%s"\nkind = "openai-chat"\nbase_url = "http://127.0.0.1:%s/v1"\nmodel = "model-a"\n\n' "$1" "$2"; }
{
  route primary "$primary_port"; route bigctx "$bigctx_port"; route flaky "$flaky_port"
  printf '[tunables]\nSSE_IDLE_TIMEOUT_S = 0.5\nSSE_DATA_STALL_TIMEOUT_S = 0.5\nPROVIDER_STREAM_RETRIES = 1\n'
  printf 'PROVIDER_STREAM_BACKOFF_S = 0.05\nRETRY_BUDGET_CONNECTION = 1\nHTTP_CONNECT_TIMEOUT_S = 1\n\n[probe]\ncontext_tokens = 1500\n'
} >"$scratch/config.toml"

targets=()
canary() { # site every args...
  local site=$1 every=$2 port; shift 2
  port=$(free_port)
  start "watch-$site" "$app" watch --every "$every" --site "$site" --db "$scratch/$site.db" \
    --metrics-addr "127.0.0.1:$port" "$@"
  wait_port "$port" "$started" || { cat "$scratch/watch-$site.log" >&2; return 1; }
  targets+=("'127.0.0.1:$port'")
}
canary office 2s --scenario healthy --requests 2
canary vpn-exit 2s --scenario ping-flood-stall --requests 2
canary branch 2s --scenario crawl --requests 2
canary colo 2s --scenario dead-primary --requests 2
canary lab 3s --config "$scratch/config.toml" --probe

web_port=$(free_port)
cp docs/prometheus/alerts.yml "$scratch/alerts.yml"
cat >"$scratch/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: stallscope
    static_configs:
      - targets: [$(IFS=,; echo "${targets[*]}")]
rule_files:
  - alerts.yml
EOF
start prometheus prometheus --config.file="$scratch/prometheus.yml" --storage.tsdb.path="${RENDER_TSDB:-$scratch/tsdb}" \
  --web.listen-address="127.0.0.1:$web_port"
wait_port "$web_port" "$started"
for _ in $(seq 300); do
  python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$web_port/-/ready')" 2>/dev/null && break
  sleep 0.2
done
begin=$(date +%s)
echo "scraping $(( ${#targets[@]} )) canaries for $seconds s (Prometheus on 127.0.0.1:$web_port)"
# The flaky route's simulator is down for the middle third.
pause $(( seconds / 3 ))
kill "$flaky"; wait "$flaky" 2>/dev/null || true
echo "flaky's simulator stopped"
pause $(( seconds / 3 ))
start sim-flaky-again "$app" sim --scenario healthy --port "$flaky_port"; wait_port "$flaky_port" "$started"
echo "flaky's simulator started again"
pause $(( seconds - 2 * (seconds / 3) ))
end=$(date +%s)
echo "run: --start $begin --end $end"
"$venv/bin/python" docs/grafana/render.py --prometheus "http://127.0.0.1:$web_port" --start "$begin" --end "$end" \
  --dashboard docs/grafana/stallscope-canary.json --out "$out"
for log in "$scratch"/watch-*.log; do echo "$(basename "$log" .log): $(grep -c '^round' "$log" || true) rounds"; done
echo "wrote $out"
