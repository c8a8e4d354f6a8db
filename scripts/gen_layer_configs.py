#!/usr/bin/env python3
"""Writes N random MoE model configs (Hugging Face config.json style) for `moejit demo --model`.

Usage: scripts/gen_layer_configs.py SEED N OUT_DIR [MAX_HIDDEN] [FORMATS]
MAX_HIDDEN (default 3072) bounds the hidden size K: e.g. 8192 reaches DeepSeek-V3-wide rows (the fp8_block
decode GEMV's SPAN kernels from about K = 4096). FORMATS: a comma list of the formats below (default all).
Formats cycle through MXFP4, GPTQ int4 (group 32/64/128, sym or not), AWQ, 8-bit GPTQ, fp8 block / channel, bf16
and f16; the routing through the gpt_oss / mixtral / qwen3_moe / deepseek_v2 / deepseek_v3 / olmoe model types; E 2..160,
top_k 1..10, hidden and intermediate sizes in each format's units. A sweep on the GPU machine:
  for f in OUT_DIR/*.json; do .device/moejit demo --model $f --arch sm_90a | grep -E 'PASS|FAIL'; done
"""
import json, random, sys, pathlib
seed = int(sys.argv[1]); n = int(sys.argv[2]); out = pathlib.Path(sys.argv[3])
out.mkdir(parents=True, exist_ok=True)
max_k = int(sys.argv[4]) if len(sys.argv) > 4 else 3072
rng = random.Random(seed)
fmts = ["mxfp4", "gptq4", "awq", "gptq8", "fp8_block", "fp8_chan", "bf16", "f16"]
if len(sys.argv) > 5:
    wanted = sys.argv[5].split(",")
    unknown = [f for f in wanted if f not in fmts]
    if unknown: sys.exit(f"unknown formats {unknown}; known: {fmts}")
    fmts = wanted
for i in range(n):
    f = fmts[i % len(fmts)]
    E = rng.choice([2, 3, 5, 8, 12, 16, 24, 32, 40, 48, 60, 64, 96, 128, 160])
    top_k = rng.randint(1, min(E, 10))
    unit = {"mxfp4": 64, "gptq4": 128, "awq": 128, "gptq8": 64, "fp8_block": 128, "fp8_chan": 64, "bf16": 32, "f16": 32}[f]
    K = unit * rng.randint(max(1, 256 // unit), max_k // unit)
    N = unit * rng.randint(max(1, 128 // unit), 1536 // unit)
    q = None
    if f == "mxfp4": q = {"quant_method": "mxfp4"}
    if f == "gptq4":
        g = rng.choice([32, 64, 128]); q = {"quant_method": "gptq", "bits": 4, "group_size": g, "sym": rng.random() < 0.5, "desc_act": False}
    if f == "awq":
        g = rng.choice([64, 128]); q = {"quant_method": "awq", "bits": 4, "group_size": g, "zero_point": True}
    if f == "gptq8": q = {"quant_method": "gptq", "bits": 8, "group_size": -1, "sym": True, "desc_act": False}
    if f == "fp8_block":
        q = {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
        N = rng.choice([128 * rng.randint(1, 12), 64 * rng.randint(2, 24)])
    if f == "fp8_chan": q = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    dtype = "float16" if f in ("f16", "awq") or (f not in ("mxfp4",) and rng.random() < 0.25) else "bfloat16"
    arch = "gpt_oss" if f == "mxfp4" and rng.random() < 0.6 else rng.choice(["mixtral", "qwen3_moe", "deepseek_v2", "deepseek_v3", "olmoe"])
    c = {"model_type": arch, "hidden_size": K, "torch_dtype": dtype}
    if arch == "gpt_oss":
        c.update({"intermediate_size": N, "num_local_experts": E, "num_experts_per_tok": top_k, "swiglu_limit": 7.0})
    elif arch == "mixtral":
        c.update({"intermediate_size": N, "num_local_experts": E, "num_experts_per_tok": top_k})
    elif arch == "qwen3_moe":
        c.update({"moe_intermediate_size": N, "num_experts": E, "num_experts_per_tok": top_k, "norm_topk_prob": rng.random() < 0.7})
    elif arch == "olmoe":
        c.update({"intermediate_size": N, "num_experts": E, "num_experts_per_tok": top_k})
    else:
        ng = rng.choice([d for d in (1, 2, 4, 8) if E % d == 0])
        tg = rng.randint(1, ng)
        while tg * (E // ng) < top_k: tg += 1
        c.update({"moe_intermediate_size": N, "n_routed_experts": E, "num_experts_per_tok": top_k, "n_group": ng, "topk_group": tg,
                  "norm_topk_prob": rng.random() < 0.5, "routed_scaling_factor": rng.choice([1.0, 2.5])})
        if arch == "deepseek_v3": c.update({"scoring_func": "sigmoid", "topk_method": "noaux_tc"})
    if q: c["quantization_config"] = q
    name = f"{i:02d}_{f}_{arch}_E{E}k{top_k}_K{K}N{N}.json"
    (out / name).write_text(json.dumps(c, indent=1))
