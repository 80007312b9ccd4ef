# One image for memq's api, worker and flower services (see docker-compose.yml).
# Pinned: the Python release of the tested stack, and ops/constraints.txt's exact versions.
FROM python:3.11.7-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY ops/constraints.txt ./ops/constraints.txt
COPY pipeline ./pipeline
COPY workers ./workers
COPY api ./api
COPY memq ./memq
RUN pip install --no-cache-dir -c ops/constraints.txt ".[server]" \
    && useradd --system --create-home memq
USER memq
ENV PYTHONUNBUFFERED=1
CMD ["memq", "api"]
