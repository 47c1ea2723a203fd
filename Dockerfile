# The polysql_ray image: Ray head and workers of kubernetes/ run this image.
#   docker build -t REGISTRY/polysql-ray:0.1.0 .                                # CPU nodes
#   docker build --build-arg EXTRAS=cluster,engines,gpu -t REGISTRY/polysql-ray:0.1.0-gpu .  # + vLLM
# The project is installed editable in /app because the Hydra configuration tree (conf/) is read
# from the checkout (polysql_ray.config.CONF_DIR), not from site-packages.
FROM python:3.11-slim

# KubeRay's default readiness/liveness probes run `bash -c "wget ... | grep success"`.
# wget is not version-pinned: the slim base's Debian release fixes it.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends wget \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Ray runs as this unprivileged user; /app is the working tree of every job
RUN useradd --create-home --uid 1000 ray
WORKDIR /app

COPY pyproject.toml README.md ./
COPY polysql_ray ./polysql_ray
COPY jobs ./jobs
COPY conf ./conf

# `cluster` adds ray[default] (dashboard, job server, the agent the probes ask); `engines` every
# engine driver (clickhouse, snowflake, bigquery; postgres/mysql are core); `openai` the SDK of the
# OpenAI-compatible generator and judge; add `gpu` for vLLM
ARG EXTRAS=cluster,engines,openai
RUN pip install --no-cache-dir -e ".[${EXTRAS}]"

USER 1000
