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


# --- which tests go through --dtype auto -------------------------------------------------------
# Every call of reading.fast_dtype (what "auto" resolves to) is noted with the test that made it;
# with $PRMKIT_AUTO_TESTS_OUT set, their node ids are written there at the end of the session, so
# that CI (.ci/run) runs exactly those tests a second time with PRMKIT_AUTO_DTYPE=bfloat16.
# Patched before any test module imports prmkit, so `from ... import fast_dtype` takes it too.
from prmkit.models import reading as _reading  # noqa: E402

_AUTO_TESTS: set[str] = set()
_fast_dtype = _reading.fast_dtype


def _noted_fast_dtype(device: str = "cpu") -> str:
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    if current:
        _AUTO_TESTS.add(current.rsplit(" (", 1)[0])
    return _fast_dtype(device)


_reading.fast_dtype = _noted_fast_dtype


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("PRMKIT_AUTO_TESTS_OUT")
    if out:
        Path(out).write_text("".join(f"{t}\n" for t in sorted(_AUTO_TESTS)), encoding="utf-8")
