# pgrecall API image. The local embedding model ships inside the installed packages,
# so the image runs offline; Postgres and Redis come from docker-compose.yml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PGRECALL_MODEL_CACHE=/srv/pgrecall/models

WORKDIR /srv/pgrecall
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY eval ./eval
COPY migrations ./migrations
RUN pip install --no-cache-dir . \
 && useradd --system --uid 10001 pgrecall \
 && python -c "from app.adapters.embedder import LocalEmbedder; LocalEmbedder()"
# ^ builds the default model's int8 graph from the installed package once, into the image
#   (app/adapters/quantized_model.py); the service only reads it.
USER pgrecall

EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=5 \
  CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2).status == 200 else 1)"
CMD ["pgrecall", "serve"]
