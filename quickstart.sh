#!/usr/bin/env bash
# One command per job on a fresh machine (Python >= 3.10 and Java 17+):
#   ./quickstart.sh serve [starscan serve flags...]   install, then start FE :8030 + BE :9060 on local Spark
#   ./quickstart.sh test  [pytest args...]            install with test extras, then run the whole suite
#   ./quickstart.sh test-spark-line VERSION [pytest args...]
#                                                     the Spark-version tier on pyspark VERSION (e.g. 3.5.9),
#                                                     in an environment of its own (.venv-spark-VERSION)
#   ./quickstart.sh test-minimum [pytest args...]    the quick tier with every dependency at the lowest
#                                                     version pyproject.toml declares (.venv-minimum)
set -euo pipefail
cd "$(dirname "$0")"

die() { printf 'error: %s\n' "$*" >&2; exit 2; }

check_python() {
  command -v python3 >/dev/null || die "python3 not found: install Python 3.10 or newer"
  python3 - <<'PY' || die "Python 3.10 or newer is needed (found $(python3 --version 2>&1))"
import sys
sys.exit(0 if sys.version_info >= (3, 10) else 1)
PY
}

check_java() {
  local java="java"
  [ -n "${JAVA_HOME:-}" ] && java="$JAVA_HOME/bin/java"
  if ! command -v "$java" >/dev/null 2>&1; then
    die "Java not found. starscan runs Spark, which needs Java 17+: apt-get install openjdk-17-jre-headless (Debian/Ubuntu), brew install openjdk@17 (macOS), or set JAVA_HOME"
  fi
  local major
  major=$("$java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\)\(\.\([0-9]*\)\)\{0,1\}.*/\1 \3/p' | head -n1 | awk '{ if ($1 == 1) print $2; else print $1 }')
  if [ -z "$major" ] || [ "$major" -lt 17 ]; then
    die "Java ${major:-unknown} found, but Spark needs Java 17+: apt-get install openjdk-17-jre-headless, or set JAVA_HOME to a JDK 17+"
  fi
}

venv() {
  if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv || die "could not create .venv (Debian/Ubuntu: apt-get install python3-venv)"
  fi
  # shellcheck disable=SC1091
  . .venv/bin/activate
  python -m pip install -q --upgrade pip >/dev/null
}

# The layers (pyproject's [tool.importlinter]), style (ruff) and types (mypy). The folders
# are installed as subpackages of `starscan` (planner/ -> starscan.planner, ...), which an
# editable install resolves at import time only; import-linter reads files, so it checks a
# copy laid out as installed.
checks() {
  local tree rc=0 repo
  repo=$(pwd)
  tree=$(mktemp -d)
  mkdir "$tree/starscan"
  cp -r starscan/. "$tree/starscan/"
  cp -r planner "$tree/starscan/planner"; cp -r provider "$tree/starscan/provider"
  cp -r gc "$tree/starscan/gc"; cp -r idl "$tree/starscan/idl"
  (cd "$tree" && PYTHONPATH="$tree" lint-imports --config "$repo/pyproject.toml" --no-cache) || rc=1
  (cd "$tree" && mypy --config-file "$repo/pyproject.toml" --cache-dir "$tree/.mypy_cache" -p starscan) || rc=1
  rm -rf "$tree"
  ruff check starscan planner provider gc tests bench || rc=1
  return "$rc"
}

cmd="${1:-}"; shift || true
# pytest on up to 4 processes (STARSCAN_TEST_WORKERS: how many; 0 runs it in this one), each
# with its own SparkSession and shared server, a test file at a time on one of them (module
# fixtures are built once). On 2 cores a serial run leaves about a quarter of the CPU idle
# while tests wait on processes, sockets and Spark's JVM. pytest's "no tests" (5) fails.
run_tests() {
  local workers rc
  workers="${STARSCAN_TEST_WORKERS:-$(n=$(nproc 2>/dev/null || echo 2); echo $(( n < 4 ? n : 4 )))}"
  parallel=()
  if [ "$workers" != 0 ]; then parallel=(-n "$workers" --dist loadfile); fi
  set +e
  python -m pytest "${parallel[@]}" "$@"
  rc=$?
  set -e
  if [ "$rc" = 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi
  exit "$rc"
}

case "$cmd" in
  serve)
    check_python; check_java; venv
    python -m pip install -q -e '.[server]'
    exec starscan serve "$@"
    ;;
  test)
    check_python; check_java
    # The Apache Thrift compiler generates the independent client the wire tests use.
    if ! command -v thrift >/dev/null 2>&1; then
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq thrift-compiler) >/dev/null \
          || echo "warning: could not install thrift-compiler; independent-client tests will be skipped" >&2
      else
        echo "warning: no 'thrift' compiler (apt-get install thrift-compiler); independent-client tests will be skipped" >&2
      fi
    fi
    # The MySQL-port tests drive Debian's mariadb command-line client.
    if ! command -v mariadb >/dev/null 2>&1 && ! command -v mysql >/dev/null 2>&1; then
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-client) >/dev/null \
          || echo "warning: could not install mariadb-client; the mysql command-line tests will be skipped" >&2
      else
        echo "warning: no 'mariadb' client (apt-get install mariadb-client); the mysql command-line tests will be skipped" >&2
      fi
    fi
    # The multi-host tier (tests/hosts) makes its test hosts with Debian's iproute2 (ip, ss).
    if ! command -v ip >/dev/null 2>&1 || ! command -v ss >/dev/null 2>&1; then
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2) >/dev/null \
          || echo "warning: could not install iproute2; the multi-host tier will be skipped (it fails with CI set)" >&2
      else
        echo "warning: no iproute2 (apt-get install iproute2); the multi-host tier will be skipped (it fails with CI set)" >&2
      fi
    fi
    # The admin-page test drives Debian's chromium through Playwright (which downloads no browser).
    if ! command -v chromium >/dev/null 2>&1; then
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null \
          || echo "warning: could not install chromium; the admin page browser test will be skipped (it fails with CI set)" >&2
      else
        echo "warning: no 'chromium' (apt-get install chromium); the admin page browser test will be skipped (it fails with CI set)" >&2
      fi
    fi
    venv
    python -m pip install -q -e '.[test]'
    checks || { echo "error: the checks failed (layers, ruff or mypy: see above)" >&2; exit 1; }
    run_tests "$@"
    ;;
  test-spark-line)
    # What differs between Spark lines (tests marked spark_line: scans on both engines, the sql
    # engine over starscan's reader, a standalone cluster from that pyspark's own jars, the
    # PySpark data source, incremental reads, Hive metastore tables, the pyspark internals a
    # JVM restart reaches) on another supported pyspark, installed as a user would:
    # pip install 'starscan[server]' 'pyspark==VERSION'.
    [ $# -ge 1 ] || die "usage: $0 test-spark-line PYSPARK_VERSION [pytest args...] (e.g. 3.5.9)"
    version="$1"; shift
    check_python; check_java
    line_env=".venv-spark-$version"
    if [ ! -x "$line_env/bin/python" ]; then
      python3 -m venv "$line_env" || die "could not create $line_env (Debian/Ubuntu: apt-get install python3-venv)"
    fi
    # shellcheck disable=SC1091
    . "$line_env/bin/activate"
    python -m pip install -q --upgrade pip >/dev/null
    python -m pip install -q -e '.[test]' "pyspark==$version"
    python - "$version" <<'PY' || die "pyspark $1 did not install in $line_env"
import sys
import pyspark
sys.exit(0 if pyspark.__version__ == sys.argv[1] else 1)
PY
    run_tests -m spark_line "$@"
    ;;
  test-minimum)
    # The lower bounds pyproject.toml declares are what the code needs: every dependency of
    # starscan and of its server and lakehouse extras pinned to its lower bound (a bound no
    # release has fails the install), then the quick tier (no Spark, no server process).
    check_python
    min_env=".venv-minimum"
    if [ ! -x "$min_env/bin/python" ]; then
      python3 -m venv "$min_env" || die "could not create $min_env (Debian/Ubuntu: apt-get install python3-venv)"
    fi
    # shellcheck disable=SC1091
    . "$min_env/bin/activate"
    python -m pip install -q --upgrade pip >/dev/null
    python -m pip install -q packaging 'tomli; python_version < "3.11"'
    python - > "$min_env/constraints.txt" <<'PY'
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
from packaging.requirements import Requirement
from packaging.version import Version

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
lowest = {}
for text in project["dependencies"] + project["optional-dependencies"]["server"] + project["optional-dependencies"]["lakehouse"]:
    req = Requirement(text)
    for spec in req.specifier:
        if spec.operator in (">=", "==", "~="):
            lowest[req.name] = max(lowest.get(req.name, Version(spec.version)), Version(spec.version))
for name, version in sorted(lowest.items()):
    print(f"{name}=={version}")
PY
    python -m pip install -q -c "$min_env/constraints.txt" -e '.[test]'
    echo "the lowest declared versions:" $(tr '\n' ' ' < "$min_env/constraints.txt")
    run_tests -m quick "$@"
    ;;
  check)
    check_python; venv
    python -m pip install -q -e '.[test]'
    checks && echo "checks passed: layers, ruff, mypy"
    ;;
  *)
    echo "usage: $0 serve [flags] | test [pytest args] | check" >&2; exit 2 ;;
esac
