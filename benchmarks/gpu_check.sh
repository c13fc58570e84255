#!/usr/bin/env bash
# Issue 17's GPU checks in one call of a lent machine (its python3 has torch but no Ray: these run
# mtcore's plain-PyTorch loops). Most important first; each step has its own time limit so that one
# failing step leaves the others' figures. Logs go to $OUT (the device tool brings them back).
#
#   bash benchmarks/gpu_check.sh [SPM_MODEL]     # SPM_MODEL: a SentencePiece model of the embedded corpus
#   ONLY="speed_huge loop_bleu" bash benchmarks/gpu_check.sh    # only those steps
set -u
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
spm=${1:+--spm $1}
step() {  # step NAME SECONDS COMMAND...: run, log to $OUT/NAME.txt, say how it ended
    local name=$1 limit=$2; shift 2
    [[ -n ${ONLY:-} && " $ONLY " != *" $name "* ]] && return  # ONLY="a b": run only those steps
    echo "=== $name ($(date -u +%T), limit ${limit}s): $*"
    timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.txt"
    echo "=== $name: exit ${PIPESTATUS[0]} at $(date -u +%T)"
}

step smi 20 nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,memory.used,memory.total --format=csv
step ceiling 60 python3 - <<'EOF'
# The bf16 matmul ceiling of this card, as the MFU's denominator is a datasheet figure (METHOD.md: measure it)
import torch
a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
for _ in range(3):
    a @ b
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(20):
    a @ b
end.record(); torch.cuda.synchronize()
print(f"bf16 matmul 8192^3, random data: {2 * 8192 ** 3 * 20 / (start.elapsed_time(end) / 1e3) / 1e12:.0f} TFLOP/s; "
      f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
EOF
# base and big at a large fixed batch (the MFU figure)
step speed_large 210 python3 benchmarks/train_speed.py --gpu --compile --presets base big --max-tokens 32768 --seq-len 64 --steps 30
step profile 90 python3 - <<'EOF'
# Where an eager bf16 step of base at 32,768 tokens spends the GPU's time: the kernels by total CUDA time
import torch
from torch.profiler import ProfilerActivity, profile
from mtcore.config import ModelConfig, TrainConfig
from mtcore.nmt.model import build_model
from mtcore.nmt.precision import training_autocast
from mtcore.nmt.training import accumulate_gradients, make_optimizer
dev = torch.device("cuda")
model = build_model(ModelConfig.preset("base", vocab_size=8000)).to(dev)
opt, sched = make_optimizer(model, TrainConfig(warmup=100), 512)
batch = [torch.randint(4, 8000, (512, 64), device=dev) for _ in range(3)]
def step():
    accumulate_gradients(model, [batch], 0.1, training_autocast(dev, True), dev, counts=[(512 * 64, 512 * 64)])
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); sched.step(); opt.zero_grad(set_to_none=True)
for _ in range(3):
    step()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(5):
        step()
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=60))
EOF
step speed_huge 150 python3 benchmarks/train_speed.py --gpu --compile --no-anchor --presets base --max-tokens 65536 --seq-len 64 --steps 20
# the GPU job's batch, 16,384 tokens (one per update), beside the 8,192 of two that it replaced (RESULTS.md)
step speed_16k 60 python3 benchmarks/train_speed.py --gpu --presets base --max-tokens 16384 --seq-len 32 --steps 30
step speed_8k 60 python3 benchmarks/train_speed.py --gpu --presets base --max-tokens 8192 --seq-len 32 --steps 30
step loop_bleu 300 python3 benchmarks/gpu_train_bleu.py --minutes 2 --probe-steps 90 $spm --out /tmp/gpu_train_bleu
step smi_after 20 nvidia-smi --query-gpu=clocks.sm,power.draw,memory.used,temperature.gpu --format=csv
