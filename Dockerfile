# pocketmq: one image for the name server and the brokers (see docker-compose.yml).
#
# The "spark" stage is the image of docker-compose.yml's spark-export service (built with
# target: spark): Java 17 and the [spark] extra, running the exporter (pocketmq.sparkexport.submit).
# The last stage stays the default image.
FROM python:3.11-slim AS spark
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
ENV PYSPARK_PYTHON=python3
WORKDIR /app
COPY pyproject.toml README.md ./
COPY broker ./broker
COPY client ./client
COPY store ./store
COPY ids ./ids
COPY sparkexport ./sparkexport
COPY cli ./cli
COPY testing ./testing
RUN pip install --no-cache-dir ".[spark]"
ENTRYPOINT ["python", "-m", "pocketmq.sparkexport.submit"]

FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY broker ./broker
COPY client ./client
COPY store ./store
COPY ids ./ids
COPY sparkexport ./sparkexport
COPY cli ./cli
COPY testing ./testing
# The [grpc] extra: the brokers also serve the RocketMQ 5.x SDKs (gRPC, --grpc-port).
RUN pip install --no-cache-dir ".[grpc]"
# name server, broker (and its VIP channel), gRPC, HTTP (health, metrics, admin API, dashboard)
EXPOSE 9876 10909 10911 8081 8082
# Healthy when the HTTP front's /health answers 200: the store takes writes and every port
# listens (docs/http.md). python, not curl: the slim image has no curl. A command that moves
# or turns off the HTTP front (--http-port, --no-http) has no health check to pass.
HEALTHCHECK --interval=5s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8082/health', timeout=2)"]
ENTRYPOINT ["pocketmq"]
# Without a command: a name server and a broker in one container (Testcontainers, docker run),
# listening on every interface, the store in /data. Add --clock manual for tests that move
# time, --advertise HOST:PORT when the broker port is published on another one (docs/testing.md).
CMD ["standalone", "--host", "0.0.0.0", "--data", "/data"]
