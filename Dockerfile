# One image for the gateway, the operator and the example tools (docs/kubernetes.md).
#   docker build -t mcp-tasks:dev .
# Runs as the unprivileged user 65532 with a read-only root file system (the Job security context).
#
# Air-gapped builds (docs/kubernetes.md, "Air-gapped image build"): BASE names any image with Python 3.11+
# and its venv module (e.g. one made from Debian packages), and WHEELS a folder of the build context
# holding wheels of the dependencies and of setuptools; then pip never reaches a package index:
#   docker build --build-arg BASE=my-base:bookworm --build-arg WHEELS=wheels -t mcp-tasks:dev .
ARG BASE=python:3.11-slim
FROM ${BASE}
ARG WHEELS=
WORKDIR /app
COPY pyproject.toml README.md ./
COPY mcp_tasks ./mcp_tasks
# Without WHEELS this copies pyproject.toml again, harmlessly: COPY needs a source.
COPY ${WHEELS:-pyproject.toml} /tmp/wheels/
# uid 65532 gets a passwd entry (`nonroot`, as in distroless images): code that looks up the user's name
# (kopf's peering identity calls getpass.getuser()) fails for a uid without one.
# A venv: Debian's own python3 refuses system-wide installs (PEP 668); `python` is the venv's.
ENV PATH=/opt/venv/bin:$PATH
RUN python3 -m venv /opt/venv \
    && if [ -n "$WHEELS" ]; then \
        pip install --no-cache-dir --no-index --find-links /tmp/wheels '.[s3,servers]'; \
    else \
        pip install --no-cache-dir '.[s3,servers]'; \
    fi \
    && rm -rf /tmp/wheels /root/.cache \
    && (getent passwd 65532 || echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/usr/sbin/nologin' >> /etc/passwd)
COPY examples ./examples
USER 65532:65532
ENV PYTHONUNBUFFERED=1
ENTRYPOINT ["mcptasks"]
