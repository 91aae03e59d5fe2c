# pocketmq: one image for the name server and the brokers (see docker-compose.yml).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY broker ./broker
COPY client ./client
COPY store ./store
COPY ids ./ids
COPY sparkexport ./sparkexport
RUN pip install --no-cache-dir .
ENTRYPOINT ["pocketmq"]
