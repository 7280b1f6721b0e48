"""The Thrift IDLs of idl/, loaded once with thriftpy2."""

from __future__ import annotations

from importlib import resources

import thriftpy2

_IDL_DIR = resources.files("starscan.idl")

#: StarRocks' external scan service (wire contract).
wire = thriftpy2.load(str(_IDL_DIR / "StarrocksExternalService.thrift"), module_name="starscan_wire_thrift")
#: starscan's own opaque plan.
plan = thriftpy2.load(str(_IDL_DIR / "starscan_plan.thrift"), module_name="starscan_plan_thrift")

IDL_DIR = _IDL_DIR
