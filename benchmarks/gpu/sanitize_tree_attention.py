"""A few small CUDA tree-attention calls for compute-sanitizer (memcheck / racecheck): single and
multiple prefix splits, ragged prefixes, padded nodes, GQA 4, head dims 64 and 128, and the scalar
fallback. Checks each result against the float32 reference so a run that "passes" the sanitizer
also computed the right thing. Usage: compute-sanitizer --tool memcheck python3 <this file>
(scripts/gpu/run.sh runs it with GPU_SANITIZER=1)
"""

import importlib

import torch

from tests.tree_attention_cases import make_case  # run from the repo root: python -m benchmarks.gpu....

ta = importlib.import_module("specdec.ops.tree_attention")

CASES = [  # (batch, nodes, q_heads, kv_heads, head_dim, prefixes, node_counts, dtype)
    (2, 9, 8, 2, 128, [700, 40], [9, 5], torch.bfloat16),
    (1, 70, 4, 1, 64, [0], None, torch.float16),
    (2, 5, 4, 2, 96, [30, 3], None, torch.bfloat16),
    (1, 3, 2, 2, 64, [10], None, torch.float32),
]
for b, n, hq, hkv, d, prefixes, counts, dtype in CASES:
    inputs = make_case(b, n, hq, hkv, d, prefixes, dtype, "cuda", seed=n, node_counts=counts)
    out = ta.tree_attention(*inputs, impl="op")
    ref = ta.tree_attention_reference(*inputs)
    err = (out.float() - ref.float()).abs().max().item()
    print(f"case B={b} N={n} D={d} {dtype}: max err vs reference {err:.3g}")
    assert err < 2e-2, err
torch.cuda.synchronize()
print("sanitize cases done")
