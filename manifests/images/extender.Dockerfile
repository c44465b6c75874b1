# syntax=docker/dockerfile:1
# The hrl-extender image: python:3.11-slim with the hrl-scheduler package WITHOUT the [train] extra (no torch),
# running as a non-root user, fine with a read-only root filesystem (nothing is written outside /tmp).
# Build from the repository root (BuildKit reads extender.Dockerfile.dockerignore next to this file):
#   docker build -f manifests/images/extender.Dockerfile -t hrl-extender:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY policy/ policy/
COPY extender/ extender/
COPY descheduler/ descheduler/
# The runtime dependencies only; fail the build if torch sneaked in.
RUN python -m venv /opt/hrl \
 && /opt/hrl/bin/pip install . \
 && /opt/hrl/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)"

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/hrl /opt/hrl
ENV PATH=/opt/hrl/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
# A numeric non-root user (Pod Security "restricted" checks runAsNonRoot against the image's numeric UID).
USER 65532:65532
EXPOSE 8888
ENTRYPOINT ["hrl-extender"]
CMD ["--config", "/etc/hrl-extender/config.yaml"]
