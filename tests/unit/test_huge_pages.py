"""The BE's switch for transparent huge pages (starscan.app.huge_pages), in a child process
so that the test's own process keeps its flag."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.quick, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux process flag")]

CHILD = """
import sys
from starscan.app.huge_pages import huge_pages_disabled, set_transparent_huge_pages
states = []
for enabled in (False, True, False):
    assert set_transparent_huge_pages(enabled)
    status = open("/proc/self/status").read()
    shown = status.split("THP_enabled:")[1].split()[0] if "THP_enabled:" in status else "?"
    states.append(f"{huge_pages_disabled()}/{shown}")
print(" ".join(states))
"""


def test_the_switch_turns_the_process_flag_off_and_on_as_the_kernel_shows_it():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() in (["True/0", "False/1", "True/0"], ["True/?", "False/?", "True/?"])
