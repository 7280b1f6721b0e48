"""The Thrift IDL parsed with ply's tables kept in the user's cache folder
(starscan.core.thrift_defs): the first process writes them, a later one reads them, and both
give the same wire module as thriftpy2's own parse."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.quick

CHILD = """
import json, sys
import thriftpy2
from starscan.core import thrift_defs
wire = thrift_defs.wire
plain = thriftpy2.load(sys.argv[1], module_name="plain_wire_thrift")
names = sorted(n for n in dir(plain) if not n.startswith("_"))
def spec(module, name):
    return repr(getattr(getattr(module, name), "thrift_spec", None)).replace(module.__name__, "M")
same = all(spec(wire, n) == spec(plain, n) for n in names) and sum(spec(wire, n) != "None" for n in names) >= 5
print(json.dumps({"names": names == sorted(n for n in dir(wire) if not n.startswith("_")), "same": same,
                  "codes": wire.TStatusCode._VALUES_TO_NAMES == plain.TStatusCode._VALUES_TO_NAMES}))
"""


def test_the_tables_are_kept_and_read_back_and_the_module_is_thriftpy2s_own(tmp_path):
    from starscan.core.thrift_defs import IDL_DIR

    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", CHILD, str(IDL_DIR / "StarrocksExternalService.thrift")],
                             capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stderr == ""  # ply says nothing
        runs.append(json.loads(out.stdout))
        kept = list((tmp_path / "starscan").glob("thriftpy2-*-tables.pickle"))
        assert len(kept) == 1 and kept[0].stat().st_size > 0
    assert runs == [{"names": True, "same": True, "codes": True}] * 2


def test_an_unwritable_cache_folder_leaves_thriftpy2_to_parse(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    env = dict(os.environ, XDG_CACHE_HOME=str(blocked))
    out = subprocess.run([sys.executable, "-c", "from starscan.core import thrift_defs; print(thrift_defs.wire.TStatusCode.OK)"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "0", out.stderr
