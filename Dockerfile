# One image for the gateway, the operator and the example tools (docs/kubernetes.md).
#   docker build -t mcp-tasks:dev .
# Runs as the unprivileged user 65532 with a read-only root file system (the Job security context).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY mcp_tasks ./mcp_tasks
RUN pip install --no-cache-dir '.[s3]' && rm -rf /root/.cache
COPY examples ./examples
USER 65532:65532
ENV PYTHONUNBUFFERED=1
ENTRYPOINT ["mcptasks"]
