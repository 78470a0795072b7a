# One image for every Venn service; docker-compose.yml picks the command.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY venn ./venn
COPY services ./services
COPY schemas ./schemas
COPY migrations ./migrations
RUN pip install --no-cache-dir -e .
ENV VENN_RUN_DIR=/var/lib/venn
CMD ["venn", "--help"]
