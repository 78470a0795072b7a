# One image for every Venn service; docker-compose.yml picks the command. The broker is
# the compose file's apache/kafka (VENN_BROKER_KIND=external): no JDK or Kafka jars here.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY venn ./venn
COPY services ./services
COPY schemas ./schemas
COPY migrations ./migrations
# The run dir must exist: Faust creates its data dir inside it, not its parents.
RUN pip install --no-cache-dir -e . && mkdir -p /var/lib/venn
# Logs reach `docker compose logs` as they are written.
ENV VENN_RUN_DIR=/var/lib/venn PYTHONUNBUFFERED=1
CMD ["venn", "--help"]
