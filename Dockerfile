# One image for every Venn service; docker-compose.yml picks the command. The broker is
# the compose file's apache/kafka (VENN_BROKER_KIND=external): no JDK or Kafka jars here.
# BASE: any image with Python 3.11 whose `python` and `pip` are on PATH (make
# compose-images builds one from Debian's packages where Docker Hub cannot be reached).
ARG BASE=python:3.11-slim
FROM ${BASE}
WORKDIR /app
# The dependencies first, in a layer that a change of the code keeps.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt && rm /tmp/requirements.txt
COPY README.md alembic.ini ./
COPY venn ./venn
COPY services ./services
COPY schemas ./schemas
COPY migrations ./migrations
# The run dir must exist: Faust creates its data dir inside it, not its parents.
RUN pip install --no-cache-dir --no-deps -e . && mkdir -p /var/lib/venn
# Logs reach `docker compose logs` as they are written.
ENV VENN_RUN_DIR=/var/lib/venn PYTHONUNBUFFERED=1
CMD ["venn", "--help"]
