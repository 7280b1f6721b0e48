# starscan: FE :8030 (HTTP) + MySQL :9030 + BE :9060 (Thrift) on embedded local Spark.
# Stage 1 builds the wheel; stage 2 is a Java 17 runtime with only the installed package.
# CI proves the same path without a Docker engine: tests/test_wheel_install.py builds the
# wheel, installs it into a fresh virtual environment, starts `starscan serve` configured by
# STARSCAN_* variables and scans a table.
#
#   docker build -t starscan .                                   # Spark 4.3
#   docker build --build-arg PYSPARK_VERSION=3.5.9 -t starscan .  # the Spark line of your cluster (3.5 to 4.3)
#   docker run -p 8030:8030 -p 9060:9060 -p 9030:9030 -v $PWD/warehouse:/warehouse \
#     -e STARSCAN_ADVERTISE_HOST=<host readers reach> starscan
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN pip wheel --no-deps -w /wheels .

FROM eclipse-temurin:17-jre-jammy
ARG PYSPARK_VERSION=4.3.0
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv tini curl \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/starscan && useradd --system --create-home --uid 10001 starscan
COPY --from=build /wheels /wheels
RUN /opt/starscan/bin/pip install --no-cache-dir "$(ls /wheels/starscan-*.whl)[server]" "pyspark==${PYSPARK_VERSION}" \
 && rm -rf /wheels
# Configuration by environment: any key as STARSCAN_<KEY> (README "Configuration"),
# e.g. STARSCAN_ADVERTISE_HOST, STARSCAN_SPARK_CONF="spark.driver.memory=4g", STARSCAN_HTTP_TLS=true.
ENV PATH=/opt/starscan/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    STARSCAN_WAREHOUSE=/warehouse \
    STARSCAN_BIND_HOST=0.0.0.0 \
    STARSCAN_LOG_FORMAT=json
RUN mkdir /warehouse && chown starscan /warehouse
USER starscan
WORKDIR /home/starscan
VOLUME ["/warehouse"]
EXPOSE 8030 9060 9030 9408 9419
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8030/api/health || exit 1
# tini is PID 1: it forwards SIGTERM to starscan (which closes scanners and stops the JVM) and reaps the JVM child.
ENTRYPOINT ["/usr/bin/tini", "--", "starscan"]
CMD ["serve"]
