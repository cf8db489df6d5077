#!/usr/bin/env bash
# bench-compute.sh: one training step (forward + backward + SGD) at batch 64 on one thread,
# PyTorch with OpenBLAS next to hetsync's CPU backend (every GEMM engine), plus hetsync's SGEMM
# GFLOP/s. Run from anywhere; it works in the repository root.
#
#   scripts/bench-compute.sh            # default: 30 timed steps per model
#   STEPS=200 scripts/bench-compute.sh
#
# Installs (Debian, root) when missing: python3-torch and libopenblas0-pthread for the PyTorch
# side, libopenblas-dev for hetsync's openblas build tag.
set -euo pipefail
cd "$(dirname "$0")/.."

STEPS=${STEPS:-30}
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

echo "running PyTorch anchor ($ANCHOR)..." >&2
"$PY" "$ANCHOR" >"$TMP/torch.tsv"
# The same models and step, timed by CPU time as well: on a shared host the wall clock also
# counts the time spent waiting for a core. OPENBLAS_NUM_THREADS=1 keeps OpenBLAS from starting
# worker threads whose spinning would count as CPU time. Prints: model cpu_ms wall_ms.
OPENBLAS_NUM_THREADS=1 "$PY" - "$ANCHOR" "$STEPS" >"$TMP/torchcpu.txt" <<'PY'
import sys, time, importlib.util
spec = importlib.util.spec_from_file_location("anchor", sys.argv[1])
anchor = importlib.util.module_from_spec(spec)
spec.loader.exec_module(anchor)
import torch, torch.nn as nn
torch.set_num_threads(1)
steps = int(sys.argv[2])
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
    print(name, (time.process_time() - c0) / steps * 1e3, (time.perf_counter() - w0) / steps * 1e3)
PY

echo "running hetsync benchmarks (go test -bench, -tags openblas)..." >&2
# The portable "go" engine is a fallback for non-amd64 hosts; its CNN step takes seconds, so
# it runs for the MLP only.
go test -tags openblas -run '^$' -bench 'TrainStep/mlp' -benchtime "${STEPS}x" -count 1 -timeout 900s ./trainer/nn/ >"$TMP/nn.txt"
go test -tags openblas -run '^$' -bench 'TrainStep/cnn/(openblas|avx)' -benchtime "${STEPS}x" -count 1 -timeout 900s ./trainer/nn/ >>"$TMP/nn.txt"
go test -tags openblas -run '^$' -bench 'Sgemm' -benchtime 0.5s -count 1 -timeout 900s ./kernels/ >"$TMP/gemm.txt"

load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# torch rows: model threads batch params step_ms samples_per_s; keep one thread.
awk -F'\t' 'NR > 1 && $2 == 1 { print $1, $5 }' "$TMP/torch.tsv" >"$TMP/torch1.txt"
# hetsync rows: BenchmarkTrainStep/<model>/<engine>-N  iters  ns/op  X cpu-ms/step  Y ms/step ...
awk '/^BenchmarkTrainStep\// {
	split($1, p, "/"); eng = p[3]; sub(/-[0-9]+$/, "", eng); cpu = wall = "nan"
	for (i = 2; i <= NF; i++) { if ($i == "ms/step") wall = $(i-1); if ($i == "cpu-ms/step") cpu = $(i-1) }
	print p[2], eng, wall, cpu
}' "$TMP/nn.txt" >"$TMP/het.txt"

echo
echo "training step, batch 64, one thread. wall = median (PyTorch anchor) or mean (go test) ms per"
echo "step; cpu = process CPU ms per step. Ratios are hetsync / PyTorch; the target is ≤ 2."
printf '%-6s %-22s %10s %10s %10s %10s\n' model implementation wall-ms cpu-ms wall-ratio cpu-ratio
while read -r model torch_ms; do
	read -r _ torch_cpu _ < <(grep "^$model " "$TMP/torchcpu.txt")
	printf '%-6s %-22s %10.3f %10.3f %10s %10s\n' "$model" "pytorch+openblas" "$torch_ms" "$torch_cpu" 1.00 1.00
	while read -r m eng ms cpu; do
		[[ $m == "$model" ]] || continue
		printf '%-6s %-22s %10.3f %10.3f %10.2f %10.2f\n' "$model" "hetsync/$eng" "$ms" "$cpu" \
			"$(awk -v a="$ms" -v b="$torch_ms" 'BEGIN { print a / b }')" \
			"$(awk -v a="$cpu" -v b="$torch_cpu" 'BEGIN { print a / b }')"
	done <"$TMP/het.txt"
done <"$TMP/torch1.txt"

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
