"""Load time of the default models from their cache folder, old layout against new, in one run.

``prmkit.models.pypi.resolve`` converts each default model's GGUF once into
``~/.cache/prmkit/models/NAME``. A cache written before cache version 2 loads its tokenizer
through the model's own tokenizer class (``GemmaTokenizer`` rebuilds the 262k-token BPE in
Python) and reads ``tokenizer.json`` twice; version 2 loads it straight from ``tokenizer.json``
(see pypi.py). The weights are the same float32 file in both.

For each default model whose cache exists (or can be converted): "old" is a temporary folder
with the cache's files (linked) and the tokenizer config as transformers first saved it (kept in
``prmkit_cache.json``), "new" is the cache itself. Every measurement runs in a fresh Python
process, so each pays its imports like a user's first load; the two alternate, ``--repeats``
times each, and the fastest run of each counts. Phases, in seconds:

* ``import``: ``import torch`` + ``import transformers`` (lazy), then transformers' model
  machinery, imported on the first config/model load (torch.distributed.tensor, dynamo ...);
* ``tokenizer``: ``AutoTokenizer.from_pretrained`` (what every prmkit loader calls);
* ``config``, ``construct`` (the model on the meta device: no weight init), ``weights``
  (``AutoModelForCausalLM.from_pretrained`` in ``--dtype`` minus the construction);
* ``load``: tokenizer + config + model, all after the imports (the figure issue 4 is about);
* ``prmkit``: ``prmkit.generate.hf.load_hf_generator(folder)`` in another fresh process after
  only ``import torch, transformers``: what a job sees, lazy imports included.

Prints a table and the load figures last. Usage:
``python bench/load.py [--models smollm2-135m,gemma3-270m] [--dtype bfloat16] [--repeats 2]``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

CHILD_PHASES = ("import torch", "import transformers", "import models", "tokenizer", "config",
                "construct", "weights")


def child(path: str, dtype_name: str) -> dict[str, float]:
    """The phases of one load, in this (fresh) process."""
    out: dict[str, float] = {}
    t = time.perf_counter()
    import torch
    out["import torch"] = time.perf_counter() - t
    t = time.perf_counter()
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
    out["import transformers"] = time.perf_counter() - t

    transformers.utils.logging.disable_progress_bar()
    t = time.perf_counter()  # the lazy imports the first load pays, whichever path
    import transformers.generation  # noqa: F401
    import transformers.modeling_utils  # noqa: F401
    model_class = MODEL_FOR_CAUSAL_LM_MAPPING[type(AutoConfig.from_pretrained(path))]
    out["import models"] = time.perf_counter() - t

    dtype = getattr(torch, dtype_name)
    t = time.perf_counter()
    AutoTokenizer.from_pretrained(path)
    out["tokenizer"] = time.perf_counter() - t
    t = time.perf_counter()
    config = AutoConfig.from_pretrained(path)
    out["config"] = time.perf_counter() - t
    t = time.perf_counter()
    with torch.device("meta"):
        model_class._from_config(config, dtype=dtype)
    out["construct"] = time.perf_counter() - t
    t = time.perf_counter()
    AutoModelForCausalLM.from_pretrained(path, dtype=dtype, use_safetensors=True)
    out["weights"] = time.perf_counter() - t - out["construct"]
    return out


def child_prmkit(path: str, dtype_name: str) -> dict[str, float]:
    """``load_hf_generator`` after only the two top-level imports."""
    for module in ("torch", "transformers"):
        importlib.import_module(module)
    from prmkit.generate.hf import HFGenConfig, load_hf_generator

    t = time.perf_counter()
    load_hf_generator(path, HFGenConfig(dtype=dtype_name))
    return {"prmkit": time.perf_counter() - t}


def run_child(mode: str, path: str, dtype: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, __file__, mode, path, "--dtype", dtype],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{mode} {path} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def old_layout(path: str) -> str | None:
    """A temporary folder that loads like ``path`` did before cache version 2: the same files
    (linked), with the tokenizer config as transformers saved it."""
    from prmkit.models.pypi import CACHE_INFO

    with open(os.path.join(path, CACHE_INFO), encoding="utf-8") as f:
        saved = json.load(f).get("saved_tokenizer_config")
    if saved is None:
        return None
    old = tempfile.mkdtemp(prefix="prmkit-bench-load-")
    for name in os.listdir(path):
        if name not in ("tokenizer_config.json", CACHE_INFO):
            os.symlink(os.path.join(path, name), os.path.join(old, name))
    with open(os.path.join(old, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(saved, f, indent=2)
    return old


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"],
                    help="bfloat16 is what the loaders' dtype 'auto' gives")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    from prmkit.errors import PrmkitError
    from prmkit.models.pypi import resolve

    print(f"python {sys.version.split()[0]}, dtype {args.dtype}, load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name in args.models.split(","):
        try:
            path = resolve(name)
        except PrmkitError as e:
            print(f"{name}: skipped ({e})")
            continue
        old = old_layout(path)
        try:
            layouts = {"old": old, "new": path} if old else {"new": path}
            best: dict[str, dict[str, float]] = {k: {} for k in layouts}
            for _ in range(args.repeats):
                for key, folder in layouts.items():
                    for mode in ("--child", "--child-prmkit"):
                        for phase, s in run_child(mode, folder, args.dtype).items():
                            best[key][phase] = min(s, best[key].get(phase, float("inf")))
            results[name] = best
        finally:
            if old:
                shutil.rmtree(old)
        for key, phases in best.items():
            phases["load"] = phases["tokenizer"] + phases["config"] + phases["construct"] + phases["weights"]
            cells = "  ".join(f"{p} {phases[p]:.2f}" for p in (*CHILD_PHASES, "load", "prmkit"))
            print(f"{name:13s} {key}: {cells}", flush=True)

    print(f"load average {os.getloadavg()[0]:.1f}")
    figures = [f"{name} {r['old']['load']:.2f} s -> {r['new']['load']:.2f} s" if "old" in r
               else f"{name} {r['new']['load']:.2f} s" for name, r in results.items()]
    print(f"RESULT load from cache after imports ({args.dtype}, old -> new): " + " | ".join(figures))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] in ("--child", "--child-prmkit"):
        mode, path = sys.argv[1], sys.argv[2]
        dtype = sys.argv[sys.argv.index("--dtype") + 1] if "--dtype" in sys.argv else "bfloat16"
        print(json.dumps((child if mode == "--child" else child_prmkit)(path, dtype)))
    else:
        main()
