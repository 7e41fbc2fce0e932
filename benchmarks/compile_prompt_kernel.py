"""The prompt kernel compiled for a GPU on any machine: registers, spills and instruction mix, without a GPU.

    python benchmarks/compile_prompt_kernel.py [--arch 90]

Triton's wheel ships ptxas, cuobjdump and nvdisasm, so the kernels of
:mod:`softmax_as_linear.engine.gpu.prompt_kernel` compile here for ``sm_<arch>`` exactly as they would on the card.
For the variants the paper sweeps use (isotropic, KMS with the paper's and the published sampler; training and
forward-only modes) and the SGD and U-v kernels, it prints the registers per thread (at most 200 keeps ten
one-warp programs per SM on an H100: a ten-seed step in one wave), the stack and local memory (spills: none
wanted), and the most frequent SASS instructions. A check that the kernels build, not a timing.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget

from softmax_as_linear.engine.gpu import counter_stream
from softmax_as_linear.engine.gpu import prompt_kernel as pk

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
PROMPT_SIGNATURE = {
    "U_ptr": "*fp32", "v_ptr": "*fp32", "alive_ptr": "*i1", "lengths_ptr": "*i32", "tiles_ptr": "*i32",
    "keys_ptr": "*i64", "step_ptr": "*i64", "step_offset": "i32", "F_ptr": "*fp32", "Fq_ptr": "*fp32", "tau": "fp32",
    "noise_sd": "fp32", "out_ptr": "*fp32", "query_ptr": "*fp32", "target_ptr": "*fp32", "scratch_ptr": "*fp32",
    "nL": "i32", "n_tiles": "i32", "n_prompts": "i32", "first_prompt": "i32", "Q_max": "i32"}


def _compile(fn, signature: dict, constants: dict, arch: int, **options):
    signature = {**signature, **{name: "constexpr" for name in constants}}
    source = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constants)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


def report(name: str, compiled) -> None:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([os.path.join(BIN, "cuobjdump"), "--dump-resource-usage", cubin.name],
                               capture_output=True, text=True).stdout
        sass = subprocess.run([os.path.join(BIN, "nvdisasm"), "-c", cubin.name], capture_output=True, text=True).stdout
    found = re.search(r"REG:(\d+).*?STACK:(\d+).*?LOCAL:(\d+)", usage)
    regs, stack, local = found.groups() if found else ("?", "?", "?")
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass)
    mix = collections.Counter(op.split(".")[0] for op in ops).most_common(6)
    print(f"{name:<50} registers {regs:>4}, stack {stack:>3} B, local {local:>3} B, {len(ops):5d} instructions; "
          + ", ".join(f"{op} {n}" for op, n in mix), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability x 10 (default: 90, Hopper)")
    args = parser.parse_args()
    if pk.triton is None or pk.INTERPRETED:
        raise SystemExit("needs Triton, not interpreted (TRITON_INTERPRET unset)")
    print(f"triton {triton.__version__}, sm_{args.arch}")
    D = 6
    base = dict(D=D, NC=counter_stream.calls_per_pair(D), LAW=0, NA=2, SOFT=0, LIN=1, QB=32, FAST=True)
    for label, prompt, query in (("isotropic", 0, 0), ("KMS, paper's sampler", 1, 1), ("KMS, published sampler", 1, 0)):
        for grad, per_tile, registers in ((True, 2, 192), (False, 3, 168)):
            constants = {**base, "STRUCT": prompt, "STRUCT_Q": query, "LPT": per_tile, "GRAD": grad}
            compiled = _compile(pk._prompt_kernel, PROMPT_SIGNATURE, constants, args.arch, num_warps=1,
                                maxnreg=registers)
            report(f"prompt kernel, {label}, {'training' if grad else 'forward only'}", compiled)
    sgd = {n: "*fp32" for n in ("out_ptr", "query_ptr", "target_ptr", "wq_ptr", "wk_ptr", "wv_ptr", "wo_ptr")}
    sgd.update({"alive_ptr": "*i1", "diverged_ptr": "*i64", "risk_ptr": "*fp32", "step_ptr": "*i64", "n_prompts": "i32",
                "runs_per_seed": "i32", "lr": "fp32", "threshold": "fp32", "inv_sqrt_D": "fp32"})
    report("SGD kernel", _compile(pk._sgd_kernel, sgd, dict(D=D, DP=8, BB=128), args.arch, num_warps=4))
    uv = {n: "*fp32" for n in ("wq_ptr", "wk_ptr", "wv_ptr", "wo_ptr", "U_ptr", "v_ptr")}
    uv["inv_sqrt_D"] = "fp32"
    report("U and v", _compile(pk._uv_kernel, uv, dict(D=D, DP=8), args.arch, num_warps=4))


if __name__ == "__main__":
    main()
