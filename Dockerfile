# nshash HTTP service: docker build -t nshash . && docker run -p 8000:8000 -v nshash-data:/data nshash
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NSHASH_STORE_URL=memory:///data/nshash.pkl

WORKDIR /app

# Dependencies first, read from pyproject.toml alone, so this layer is rebuilt only when the
# dependencies change, not on every code change.
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; x = p['optional-dependencies']; print('\n'.join(p['dependencies'] + x['leveldb'] + x['redis'] + x['service'] + x['similarity'] + x['keyed']))" > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# The code: installs the library as nshash and the app as nshash_service.
COPY README.md setup.py ./
COPY nshash/ nshash/
COPY service/ service/
RUN pip install --no-cache-dir --no-deps . \
    && groupadd --system --gid 10001 nshash \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin nshash \
    && mkdir -p /data \
    && chown 10001:10001 /data

USER 10001:10001
WORKDIR /data
VOLUME /data
EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]

# One worker: the default memory store (and LevelDB) live in one process. With
# NSHASH_STORE_URL=redis://... add "--workers N" (see docker-compose.yml). nshash serve rather
# than plain uvicorn: it closes connections that do not send their headers in time
# (NSHASH_HEADER_TIMEOUT), passes NSHASH_IDLE_TIMEOUT and NSHASH_MAX_CONNECTIONS on, logs each
# request once with secrets redacted, and shares its socket with TCP_NODELAY.
CMD ["nshash", "serve", "--host", "0.0.0.0", "--port", "8000"]
