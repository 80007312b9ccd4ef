# One image for memq's api, worker and flower services (see docker-compose.yml).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY workers ./workers
COPY api ./api
COPY memq ./memq
RUN pip install --no-cache-dir ".[server]" \
    && useradd --system --create-home memq
USER memq
ENV PYTHONUNBUFFERED=1
CMD ["memq", "api"]
