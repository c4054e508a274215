# SPDX-License-Identifier: MIT
"""examples/kv_transfer.py runs end to end (two movers, a prefill and a
decode process, every page checked) with numpy and with torch caches."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kv_transfer.py"


@pytest.mark.parametrize("cache", ["numpy", "torch"])
def test_kv_transfer_example_verifies_every_page(cache):
    if cache == "torch":
        pytest.importorskip("torch")
    args = [sys.executable, str(EXAMPLE), "--requests", "6", "--layers", "2", "--num-pages",
            "128", "--max-pages", "16"] + (["--numpy"] if cache == "numpy" else [])
    r = subprocess.run(args, capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every page verified" in r.stdout and f"({cache} KV cache)" in r.stdout
