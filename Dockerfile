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
# The [grpc] extra: the brokers also serve the RocketMQ 5.x SDKs (gRPC, --grpc-port).
RUN pip install --no-cache-dir ".[grpc]"
ENTRYPOINT ["pocketmq"]
