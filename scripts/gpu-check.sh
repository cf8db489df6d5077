#!/bin/bash
# The GPU check, on a machine with an NVIDIA GPU and a CUDA build of torch but no Go, run from
# the repository root with the bundle scripts/gpu-bundle.sh made in .dev/carry: the Python
# package's collective, DDP and backend tests on CUDA tensors (HETSYNC_TEST_DEVICE=cuda), the
# DDP ResNet-18 example on the GPU (hetsync against Gloo), kernels/cuda's parity tests against
# the real driver, and hetsync train on cuda:0 against the CPU. About 6 minutes.
C=.dev/carry
log() { echo "=== $* ($(date +%T))"; }
log machine
nvidia-smi -L; python3 -c 'import torch,sys;print("python",sys.version.split()[0],"torch",torch.__version__,"cuda",torch.cuda.is_available(),torch.cuda.get_device_name(0))'
nproc; free -g | head -2
python3 - <<'P'
import lzma, os, shutil
os.makedirs("bin", exist_ok=True); os.makedirs("python/hetsync/_lib", exist_ok=True)
for src, dst in ((".dev/carry/hetsync.xz", "bin/hetsync"), (".dev/carry/libhetsync.so.xz", "python/hetsync/_lib/libhetsync.so"), (".dev/carry/hetsync-cuda.xz", "bin/hetsync-cuda")):
    with lzma.open(src) as f, open(dst, "wb") as g: shutil.copyfileobj(f, g)
    os.chmod(dst, 0o755)
P
export PYTHONPATH=$PWD/python HETSYNC_BIN=$PWD/bin/hetsync PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2
log "python tests on CUDA tensors (test_collectives: every collective/dtype 1-5 ranks, DDP, async)"
HETSYNC_TEST_DEVICE=cuda timeout 200 python3 -m pytest -q -p no:cacheprovider python/tests/test_collectives.py 2>&1 | tail -60
log "DDP ResNet-18 example on the GPU, hetsync backend"
timeout 150 bin/hetsync launch -np 4 -- python3 examples/torch/ddp_resnet.py --data $C/data --device cuda --steps 40 --batch 64 --train-samples 10000 --test-samples 2000 --workers 1 2>&1 | tail -12
log "DDP ResNet-18 example on the GPU, gloo backend"
timeout 120 bin/hetsync launch -np 4 -- python3 examples/torch/ddp_resnet.py --data $C/data --device cuda --backend gloo --steps 40 --batch 64 --train-samples 10000 --test-samples 2000 --workers 1 2>&1 | tail -6
log "kernels/cuda parity tests against the driver"
CB=$(find / -xdev -name 'libcublas.so.1[23]*' 2>/dev/null | head -1); echo "cublas: $CB"
export LD_LIBRARY_PATH=$PWD/$C/shim:$(dirname "$CB"):$LD_LIBRARY_PATH
timeout 150 $C/cuda.test -test.v -test.count=1 -test.timeout 140s 2>&1 | grep -v "^=== RUN" | tail -50
log "hetsync train on cuda:0 against cpu (2 ranks, cnn, 1 epoch of 10k)"
for d in cuda:0 cpu; do timeout 90 bin/hetsync-cuda train --np 2 --sync ssgd --model cnn --device $d --data $C/data --epochs 1 --out /tmp/run-$d 2>&1 | tail -3; done
log done
