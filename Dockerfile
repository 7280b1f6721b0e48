# starscan: FE :8030 + BE :9060 on embedded local Spark.
# Stage 1 builds the wheel; stage 2 is a Java 17 runtime with only the installed package.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN pip wheel --no-deps -w /wheels .

FROM eclipse-temurin:17-jre-jammy
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv tini curl \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/starscan && useradd --system --create-home --uid 10001 starscan
COPY --from=build /wheels /wheels
RUN /opt/starscan/bin/pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
ENV PATH=/opt/starscan/bin:$PATH \
    STARSCAN_WAREHOUSE=/warehouse \
    STARSCAN_BIND_HOST=0.0.0.0
RUN mkdir /warehouse && chown starscan /warehouse
USER starscan
VOLUME ["/warehouse"]
EXPOSE 8030 9060
HEALTHCHECK --interval=30s --timeout=5s --start-period=90s CMD curl -fsS http://127.0.0.1:8030/api/health || exit 1
ENTRYPOINT ["/usr/bin/tini", "--", "starscan"]
CMD ["serve"]
