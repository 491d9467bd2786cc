import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # tests/tiny.py

DATA = Path(os.environ.get("PRMKIT_SHARED_DATA",
                           Path(__file__).resolve().parents[1].parent / "shared" / "data"))


@pytest.fixture
def shared_data() -> Path:
    if not DATA.is_dir():
        pytest.skip(f"shared data folder {DATA} is missing")
    return DATA
