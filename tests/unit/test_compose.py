"""compose.yaml cannot be run here (no Docker engine): what can be checked without one is
checked. Every starscan service's command parses with the CLI as it is, every STARSCAN_
variable is a setting, the FE's be_endpoints name exactly the BE services (as each
advertises itself), and the BEs use the master the compose file starts."""

from __future__ import annotations

from pathlib import Path

import yaml

from starscan.settings.config import Settings

REPO = Path(__file__).resolve().parents[2]


def _services() -> dict:
    return yaml.safe_load((REPO / "compose.yaml").read_text())["services"]


def test_every_starscan_service_is_a_valid_serve_command():
    import typer.main

    from starscan.app.cli import app

    command = typer.main.get_command(app)
    starscan = {name: s for name, s in _services().items() if s["command"][0] == "serve"}
    assert set(starscan) == {"fe", "be1", "be2"}
    for name, service in starscan.items():
        serve = command.commands["serve"]  # type: ignore[attr-defined]
        ctx = serve.make_context("serve", list(service["command"][1:]), resilient_parsing=False)
        assert ctx.params["role"] in ("fe", "be"), name
        for key in service.get("environment", {}):
            if key.startswith("STARSCAN_"):
                assert key[len("STARSCAN_"):].lower() in Settings.model_fields, (name, key)


def test_the_fe_routes_to_exactly_the_be_services_and_they_use_the_compose_master():
    services = _services()
    args = services["fe"]["command"]
    endpoints = args[args.index("--be-endpoints") + 1].split(",")
    bes = {n: s for n, s in services.items() if "--role" in s["command"] and s["command"][s["command"].index("--role") + 1] == "be"}
    assert sorted(endpoints) == sorted(f"{s['environment']['STARSCAN_ADVERTISE_HOST']}:9060" for s in bes.values())
    assert {e.split(":")[0] for e in endpoints} == set(bes)
    for service in bes.values():
        master = service["command"][service["command"].index("--spark-master") + 1]
        assert master == "spark://spark-master:7077" and "--port 7077" in services["spark-master"]["command"][0]
    workers = [s for s in services.values() if "deploy.worker.Worker" in s["command"][0]]
    assert len(workers) == 2 and all("spark://spark-master:7077" in w["command"][0] for w in workers)
