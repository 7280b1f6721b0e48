"""Helpers shared by the benchmarks in this folder (not a test; nothing here is imported by starscan).

- ``environment()``: versions and machine facts for the results (python, pyspark, pyarrow,
  thriftpy2, sqlglot, fastapi, uvicorn, Java, cores, memory, CPU model, kernel, git commit).
- ``start_server(...)``: a SparkSession (``local[2]`` by default, ``SPARK_LOCAL_IP=127.0.0.1``,
  configurable driver memory) and an in-process ``StarscanServer`` on 127.0.0.1 with free ports.
- ``percentile`` / ``summarize``: latency statistics.
- ``PeakRSS``: peak resident memory of this process and its children (the Spark JVM, client
  worker processes), sampled every 50 ms by a thread with psutil.
- ``report(...)`` / ``write_record(...)``: one JSON record per run in ``bench/results/``, from
  which ``bench/results_page.py`` generates ``bench/RESULTS.md``.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import psutil

# The tests' support package (moto's S3 server, the fault proxy, waits, the reliability
# workloads, process measurements): the benchmarks import it from tests/support/, and the
# tests never import the benchmarks (they run them as programs).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.processes import PeakRSS, cpu_seconds, jvm_process, log  # noqa: E402,F401  (the benchmarks' names)

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent

PACKAGES = ("pyspark", "pyarrow", "thriftpy2", "sqlglot", "fastapi", "uvicorn", "httpx", "psutil")



# ---- environment -------------------------------------------------------------------------

def _run(cmd: list[str], cwd: Path | None = None) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (out.stdout + out.stderr).strip()


def _java_version() -> str:
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    text = _run([java, "-version"])
    for line in text.splitlines():
        if "version" in line:
            return line.strip()
    return text.splitlines()[0] if text else "not found"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


#: The CPU features Arrow's and the codecs' kernels choose their code paths by.
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "bmi2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "sha_ni", "vaes")


def _cpu_flags() -> str:
    """Which of ``SIMD_FLAGS`` the CPU has (hosts of one model name can differ in these)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return " ".join(f for f in SIMD_FLAGS if f in have) or "none of " + " ".join(SIMD_FLAGS)
    except OSError:
        pass
    return "unknown"


def _git_commit() -> str:
    commit = _run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO_DIR)
    if not commit or " " in commit:
        return "unknown"
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_DIR)
    return commit + (" (+uncommitted changes)" if dirty else "")


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _huge_pages() -> str:
    """The machine's transparent huge page mode (the bracketed word); the BE's own process
    turns them off unless be_transparent_huge_pages is set (starscan.app.huge_pages)."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "unknown"
    mode = text[text.find("[") + 1:text.find("]")] if "[" in text else text.strip()
    return f"{mode} (the BE's process: off unless be_transparent_huge_pages)"


def environment() -> dict[str, str]:
    """Versions and machine facts, in a stable order."""
    nproc = _run(["nproc"]) or str(len(os.sched_getaffinity(0)))
    mem = psutil.virtual_memory().total
    env = {"python": platform.python_version()}
    for name in PACKAGES:
        env[name] = _version(name)
    env.update({
        "java": _java_version(),
        "nproc": nproc,
        "memory": f"{mem / 2**30:.1f} GiB",
        "cpu": _cpu_model(),
        "cpu flags": _cpu_flags(),
        "kernel": platform.release(),
        "transparent huge pages": _huge_pages(),
        "git commit": _git_commit(),
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    })
    return env


def format_environment(env: dict[str, str] | None = None) -> str:
    env = env or environment()
    return "\n".join(f"- {k}: {v}" for k, v in env.items())


# ---- server ------------------------------------------------------------------------------

def start_server(warehouse: str | Path, driver_memory: str = "2g", master: str = "local[2]",
                 spark_conf: dict[str, str] | None = None, **settings_overrides):
    """Start a SparkSession and an in-process starscan server on 127.0.0.1 with free ports.

    Returns ``(server, spark, settings)``. ``STARSCAN_*`` variables and any ``starscan.conf``
    are ignored, so the benchmark measures the defaults plus what is passed here. Stop with
    ``server.stop(); spark.stop()``.
    """
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    for key in [k for k in os.environ if k.startswith("STARSCAN_")]:
        del os.environ[key]
    from starscan.app.server import StarscanServer
    from starscan.settings.config import load_settings
    from starscan.spark.session import build_session

    conf = {"spark.driver.memory": driver_memory}
    conf.update(spark_conf or {})
    overrides = dict(warehouse=Path(warehouse), spark_master=master, http_port=0, be_port=0, flight_sql_port=0, be_flight_port=0,
                     bind_host="127.0.0.1", advertise_host="127.0.0.1", spark_conf=conf, demo_scale=0)
    overrides.update(settings_overrides)
    # An empty conf file: a stray ./starscan.conf must not change what is measured.
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as fh:
        empty_conf = fh.name
    try:
        settings = load_settings(conf_file=empty_conf, **overrides)
    finally:
        os.unlink(empty_conf)
    spark = build_session(settings)
    server = StarscanServer(settings, spark).start()
    return server, spark, server.settings


# ---- arguments ---------------------------------------------------------------------------

def scan_bench_arguments(ap, warehouse: str) -> None:
    """The options of a bench that reads through ``scan_throughput.measure_starscan`` with the
    bundled client in a process of its own: the warehouse, Spark's driver memory, the time a
    read may take, and whether to record the run."""
    ap.add_argument("--warehouse", default=warehouse)
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--no-append", action="store_true")
    ap.add_argument("--local-read-slots", type=int, default=None,
                    help="scan_local_read_slots of the server (default: the server's, the machine's cores; 0: every "
                         "split read by a Spark task)")


def read_slot_settings(args) -> dict:
    """The server settings ``scan_bench_arguments``' ``--local-read-slots`` asks for."""
    return {} if args.local_read_slots is None else {"scan_local_read_slots": args.local_read_slots}


def parse_scan_bench_arguments(ap):
    """``ap``'s arguments, with the client read in a process of its own (``measure_starscan``)."""
    args = ap.parse_args()
    args.client_in_process = False
    return args


# ---- statistics --------------------------------------------------------------------------

def percentile(values, q: float) -> float:
    """The q-th percentile (0..100), linear interpolation between closest ranks (numpy's default)."""
    data = sorted(values)
    if not data:
        return float("nan")
    if len(data) == 1:
        return float(data[0])
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return float(data[lo] + (data[hi] - data[lo]) * (pos - lo))


def summarize(latencies_s, wall_s: float | None = None) -> dict[str, float]:
    """p50/p90/p99/max in ms (and req/s when the wall time is given)."""
    ms = [x * 1000.0 for x in latencies_s]
    out = {
        "n": len(ms),
        "p50": percentile(ms, 50), "p90": percentile(ms, 90), "p99": percentile(ms, 99),
        "max": max(ms) if ms else float("nan"), "mean": sum(ms) / len(ms) if ms else float("nan"),
    }
    if wall_s is not None:
        out["rps"] = len(ms) / wall_s if wall_s > 0 else float("nan")
    return out


def min_median(values) -> tuple[float, float]:
    data = [v for v in values if v is not None]
    if not data:
        return float("nan"), float("nan")
    return min(data), percentile(data, 50)


def best_median(values) -> tuple[float, float]:
    """(max, median): for rates, where higher is better."""
    data = [v for v in values if v is not None]
    if not data:
        return float("nan"), float("nan")
    return max(data), percentile(data, 50)


def fmt(x, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:,.{digits}f}"


def gb(nbytes) -> str:
    return "–" if not nbytes else f"{nbytes / 1e9:.2f} GB"


def markdown_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


# ---- memory ------------------------------------------------------------------------------

# ---- results -----------------------------------------------------------------------------

def write_record(title: str, conditions: dict, table_markdown: str, env: dict[str, str] | None = None,
                 benchmark: str | None = None, folder: Path | None = None) -> Path:
    """One run as data: ``bench/results/<UTC time>-<benchmark>.json`` with the commit,
    versions and machine, conditions and the table; then bench/RESULTS.md is generated again
    from every record (bench/results_page.py)."""
    import results_page

    env = env or environment()
    now = _dt.datetime.now(_dt.timezone.utc)
    benchmark = benchmark or Path(sys.argv[0]).stem
    record = {"benchmark": benchmark, "title": title, "time": now.strftime("%Y-%m-%d %H:%M UTC"),
              "commit": env.get("git commit", "unknown"), "environment": env,
              "conditions": {k: str(v) for k, v in conditions.items()}, "table": table_markdown}
    folder = folder or results_page.RESULTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{now.strftime('%Y%m%dT%H%M%SZ')}-{benchmark}.json"
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if folder == results_page.RESULTS_DIR:
        results_page.write_page()
    return path


def print_section(title: str, conditions: dict, table_markdown: str, env: dict[str, str] | None = None) -> None:
    print(f"\n## {title}\n")
    print(format_environment(env))
    print()
    for k, v in conditions.items():
        print(f"- {k}: {v}")
    print()
    print(table_markdown)
    sys.stdout.flush()


def report(title: str, conditions: dict, table_md: str, env: dict, append: bool) -> None:
    """Print a run's section and, unless told not to, record it (bench/results/) and
    generate bench/RESULTS.md again."""
    conditions["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print_section(title, conditions, table_md, env)
    if append:
        log(f"recorded in {write_record(title, conditions, table_md, env=env)}")


def missing_modules(names: list[str]) -> list[str]:
    """Those of ``names`` this Python cannot import (checked before a benchmark starts, so a
    missing extra is said at once, not after minutes of set-up)."""
    import importlib.util

    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing
