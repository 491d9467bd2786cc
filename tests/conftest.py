import os
import sys
from pathlib import Path

import pytest

from prmkit.shareddata import shared_data_dir

sys.path.insert(0, os.path.dirname(__file__))  # tests/tiny.py

DATA = Path(shared_data_dir())


@pytest.fixture
def shared_data() -> Path:
    if not DATA.is_dir():
        pytest.skip(f"shared data folder {DATA} is missing")
    return DATA


@pytest.fixture
def tiny_base(tmp_path) -> str:
    """A folder with a tiny random causal LM and its tokenizer: a base model for trainers."""
    import tiny

    path = tmp_path / "base"
    tiny.causal_lm().save_pretrained(path, safe_serialization=True)
    tiny.tokenizer().save_pretrained(path)
    return str(path)


@pytest.fixture
def one_thread():
    """torch on one thread for the test (real-model timings and outputs stay comparable)."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
