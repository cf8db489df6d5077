#!/usr/bin/env bash
# bench-compute.sh: one training step (forward + backward + SGD) at batch 64 on one thread,
# PyTorch with OpenBLAS next to hetsync's CPU backend (every GEMM engine), plus hetsync's SGEMM
# GFLOP/s. Run from anywhere; it works in the repository root.
#
#   scripts/bench-compute.sh                  # default: 3 rounds of 30 timed steps per model
#   ROUNDS=5 STEPS=200 scripts/bench-compute.sh
#
# On a host shared with other work, time per step drifts by tens of per cent within a minute,
# so the two sides are interleaved: every round times PyTorch and then hetsync, each ratio is
# taken within its round, and the table shows medians over the rounds.
#
# Installs (Debian, root) when missing: python3-torch and libopenblas0-pthread for the PyTorch
# side, libopenblas-dev for hetsync's openblas build tag.
set -euo pipefail
cd "$(dirname "$0")/.."

STEPS=${STEPS:-30}
ROUNDS=${ROUNDS:-3}
ANCHOR=../shared/peers/compute/torch_mlp_step.py
PY=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

need=()
"$PY" -c 'import torch' 2>/dev/null || need+=(python3-torch)
dpkg -s libopenblas0-pthread >/dev/null 2>&1 || need+=(libopenblas0-pthread)
dpkg -s libopenblas-dev >/dev/null 2>&1 || need+=(libopenblas-dev)
if ((${#need[@]})); then
	echo "installing: ${need[*]}" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}" >&2
fi

echo "# host: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)" >&2
echo "# BLAS behind PyTorch: $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)" >&2

echo "building hetsync benchmarks (go test -c, -tags openblas)..." >&2
go test -tags openblas -c -o "$TMP/nn.test" ./workload/nn/
go test -tags openblas -c -o "$TMP/kernels.test" ./kernels/

for round in $(seq "$ROUNDS"); do
	echo "round $round of $ROUNDS..." >&2
	# The anchor's models and step, timed by CPU time and by the wall clock: on a shared host
	# the wall clock also counts the time spent waiting for a core. OPENBLAS_NUM_THREADS=1 keeps
	# OpenBLAS from starting worker threads whose spinning would count as CPU time. Prints:
	# round model implementation wall_ms cpu_ms.
	OPENBLAS_NUM_THREADS=1 "$PY" - "$ANCHOR" "$STEPS" "$round" >>"$TMP/rows.txt" <<'PY'
import sys, time, importlib.util
spec = importlib.util.spec_from_file_location("anchor", sys.argv[1])
anchor = importlib.util.module_from_spec(spec)
spec.loader.exec_module(anchor)
import torch, torch.nn as nn
torch.set_num_threads(1)
steps, rnd = int(sys.argv[2]), sys.argv[3]
for name, make in (("mlp", anchor.mlp), ("cnn", anchor.cnn)):
    torch.manual_seed(0)
    m = make()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x = torch.randn(64, 1, 28, 28); y = torch.randint(0, 10, (64,))
    lossf = nn.CrossEntropyLoss()
    def step():
        opt.zero_grad(); loss = lossf(m(x), y); loss.backward(); opt.step()
    for _ in range(10):
        step()
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        step()
    print(rnd, name, "pytorch+openblas", (time.perf_counter() - w0) / steps * 1e3, (time.process_time() - c0) / steps * 1e3)
PY
	# The portable "go" engine is a fallback for non-amd64 hosts; its CNN step takes seconds,
	# so it runs for the MLP only. OPENBLAS_NUM_THREADS=1 as for PyTorch: the openblas engine
	# links the same library, whose idle workers would otherwise count as CPU time.
	for bench in 'TrainStep/mlp' 'TrainStep/cnn/(openblas|avx)'; do
		OPENBLAS_NUM_THREADS=1 GOMAXPROCS=1 "$TMP/nn.test" -test.run '^$' -test.bench "$bench" -test.benchtime "${STEPS}x" -test.timeout 900s
	done | awk -v r="$round" '/^BenchmarkTrainStep\// {
		split($1, p, "/"); eng = p[3]; sub(/-[0-9]+$/, "", eng); cpu = wall = "nan"
		for (i = 2; i <= NF; i++) { if ($i == "ms/step") wall = $(i-1); if ($i == "cpu-ms/step") cpu = $(i-1) }
		print r, p[2], "hetsync/" eng, wall, cpu
	}' >>"$TMP/rows.txt"
done
OPENBLAS_NUM_THREADS=1 "$TMP/kernels.test" -test.run '^$' -test.bench 'Sgemm' -test.benchtime 0.5s -test.timeout 900s >"$TMP/gemm.txt"

load_after=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "training step, batch 64, one thread, $ROUNDS interleaved rounds of $STEPS steps: medians over"
echo "the rounds of wall and process-CPU ms per step, and of the ratio hetsync / PyTorch taken"
echo "within each round. The target is a ratio ≤ 1."
"$PY" - "$TMP/rows.txt" <<'PY'
import sys, statistics, collections
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
t = collections.defaultdict(dict)  # (model, impl) -> round -> (wall, cpu)
for rnd, model, impl, wall, cpu in rows:
    t[(model, impl)][rnd] = (float(wall), float(cpu))
print("%-6s %-22s %10s %10s %10s %10s" % ("model", "implementation", "wall-ms", "cpu-ms", "wall-ratio", "cpu-ratio"))
for model in ("mlp", "cnn"):
    ref = t[(model, "pytorch+openblas")]
    for (m, impl), v in t.items():
        if m != model:
            continue
        med = lambda i: statistics.median(x[i] for x in v.values())
        ratio = lambda i: statistics.median(v[r][i] / ref[r][i] for r in v if r in ref)
        print("%-6s %-22s %10.3f %10.3f %10.2f %10.2f" % (model, impl, med(0), med(1), ratio(0), ratio(1)))
PY

echo
echo "SGEMM, one thread"
printf '%-10s %-16s %10s %12s\n' engine shape GFLOP/s GFLOP/cpu-s
awk '/^BenchmarkSgemm\// {
	split($1, p, "/"); shape = p[3]; sub(/-[0-9]+$/, "", shape)
	g = c = "nan"
	for (i = 2; i <= NF; i++) { if ($i == "GFLOP/s") g = $(i-1); if ($i == "GFLOP/cpu-s") c = $(i-1) }
	printf "%-10s %-16s %10.1f %12.1f\n", p[2], shape, g, c
}' "$TMP/gemm.txt"
echo
echo "# load average after: $load_after (numbers on a loaded host are upper bounds on time)"
