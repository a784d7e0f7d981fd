#!/usr/bin/env bash
# bench-ab.sh RUNS 'BENCH_A' 'BENCH_B' [SCENARIOS]: runs two builds of the
# benchmark alternately (A, B, A, B, …) RUNS times each, so both see the same
# machine, and prints the median (and range) of the figures that show the
# coordinator's own cost: a chain's ready→started p50 and p99, raw-serial's
# p50 (the bus alone, for reference), and CPU, allocation and throughput per
# node of the nodes and gated scenarios, with the ratio B/A.
#
# BENCH_A and BENCH_B are commands that take the bench's flags, e.g.
#   scripts/bench-ab.sh 7 '/tmp/old/bin/coordinator bench' bin/supervisor-bench
set -euo pipefail
runs=${1:?usage: bench-ab.sh RUNS BENCH_A BENCH_B [SCENARIOS]}
a=${2:?}; b=${3:?}
scenarios=${4:-raw-serial,nodes,gated,chain}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for i in $(seq 1 "$runs"); do
  for v in A B; do
    cmd=$a; [ "$v" = B ] && cmd=$b
    echo "bench-ab: run $i of $runs, $v: $cmd" >&2
    # $cmd is split on white space on purpose: a binary and its subcommand.
    $cmd --scenarios "$scenarios" -o json 2>/dev/null | python3 -c '
import json, sys
r = {x["scenario"]: x for x in json.load(sys.stdin)["results"]}
row = {"v": sys.argv[1]}
if "chain" in r: row.update(chain_p50_us=r["chain"]["latency_p50_us"], chain_p99_us=r["chain"]["latency_p99_us"])
if "raw-serial" in r: row["raw_serial_p50_us"] = r["raw-serial"]["latency_p50_us"]
for s in ("nodes", "gated"):
    if s in r:
        m = r[s]["memory"]
        row[s + "_cpu_per_node_ms"] = m["cpu_per_op_us"] / 1000
        row[s + "_alloc_per_node_kib"] = m["alloc_bytes_per_op"] / 1024
        row[s + "_nodes_per_s"] = r[s]["throughput_per_s"]
print(json.dumps(row))' "$v" >> "$out"
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = [k for k in rows[0] if k != "v"]
print(f"{'figure':28s} {'A median':>10s} {'A range':>20s} {'B median':>10s} {'B range':>20s} {'B/A':>6s}")
for k in keys:
    a = [r[k] for r in rows if r["v"] == "A" and k in r]
    b = [r[k] for r in rows if r["v"] == "B" and k in r]
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{k:28s} {ma:10.1f} {f'{min(a):.1f}-{max(a):.1f}':>20s} {mb:10.1f} {f'{min(b):.1f}-{max(b):.1f}':>20s} {mb/ma:6.2f}")
PY
