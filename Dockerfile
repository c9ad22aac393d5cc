# nshash HTTP service: docker build -t nshash . && docker run -p 8000:8000 -v nshash-data:/data nshash
#
# Two stages: the builder has a C compiler and builds wheels of nshash (with both compiled
# paths, the text kernel and the assignment core; the build fails rather than fall back to the
# pure path) and of every dependency of the service's extras; the image installs those wheels
# on a slim base with no compiler and runs `nshash serve`.

FROM python:3.12-slim AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    NSHASH_REQUIRE_KERNEL=1

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src

# Dependencies first, read from pyproject.toml alone, so this layer is rebuilt only when the
# dependencies change, not on every code change. The extras are every one a documented
# service setting needs: the stores (leveldb, redis), the service, /v1/compare (similarity)
# and NSHASH_METHOD=keyed (keyed).
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; x = p['optional-dependencies']; print('\n'.join(p['dependencies'] + x['leveldb'] + x['redis'] + x['service'] + x['similarity'] + x['keyed']))" > requirements.txt \
    && pip wheel --wheel-dir /wheels -r requirements.txt

# The code: a wheel of the library (as nshash) and the app (as nshash_service).
COPY README.md setup.py ./
COPY nshash/ nshash/
COPY service/ service/
RUN pip wheel --no-deps --wheel-dir /wheels .


FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NSHASH_STORE_URL=memory:///data/nshash.pkl

COPY --from=builder /wheels /wheels
RUN pip install --no-cache-dir --no-index /wheels/*.whl \
    && rm -rf /wheels \
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

# nshash serve: one-line start-up errors, the socket settings and the store's checks; it
# closes connections that do not send their headers in time (NSHASH_HEADER_TIMEOUT) and logs
# each request once with secrets redacted. One worker: the default memory store (and LevelDB)
# live in one process; with NSHASH_STORE_URL=redis://... add "--workers N" (see
# docker-compose.yml).
CMD ["nshash", "serve", "--host", "0.0.0.0", "--port", "8000"]
