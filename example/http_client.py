"""HTTP client: send articles to the nshash service and print the hot stories it found.

What a crawler does: post each article as it arrives (``POST /v1/documents``, or many at
once with ``POST /v1/documents/batch``), keep the ``similar_id`` it gets back, and ask for
the largest groups (``GET /v1/groups``). It talks to the service through
:class:`nshash.client.Client` (``pip install 'nshash[client]'``), which retries a failed
request when that is safe: every article is sent with its id, so a resend changes nothing.

Without ``--url`` the script starts the service itself, in this process, on a free loopback
port with an in-memory store (``memory://``), so it runs with no server and writes nothing;
that needs ``pip install 'nshash[service]'``.

Usage::

    python example/http_client.py                                  # its own server
    python example/http_client.py --url http://127.0.0.1:8000      # a running service
    python example/http_client.py --url http://host:8000 --api-key KEY --batch

The input is JSONL with ``id``, ``title`` and ``content`` (or ``text``) per line
(default: ``example/articles.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from nshash import EmptyDocumentError, NSHashError, StoreUnavailableError
from nshash.client import Client, ServiceError

HERE = Path(__file__).resolve().parent


@contextmanager
def local_service() -> Iterator[str]:
    """Run the service in a thread on a free loopback port with ``memory://``; yield its URL."""
    try:
        import uvicorn
        from nshash_service import Settings, create_app
    except ImportError:
        try:
            import uvicorn

            from service import Settings, create_app  # a source checkout
        except ImportError:
            sys.exit("The service is not installed: pip install 'nshash[service]', or pass --url")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    app = create_app(Settings(store_url="memory://"))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            sys.exit("The local service did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def read_articles(path: Path) -> list[dict[str, Any]]:
    """Read the JSONL articles as API documents (``text``, ``id``, ``title``)."""
    documents = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                text = row.get("content") or row.get("text") or ""
                documents.append({"text": text, "id": str(row["id"]), "title": row.get("title")})
    return documents


def run(client: Client, documents: list[dict[str, Any]], batch: bool, top: int) -> None:
    """Send the documents, then print the hot stories.

    Raises:
        ServiceError: the service refused a request for a reason other than the document
            (a wrong API key, for one).
        StoreUnavailableError: the service cannot be reached, after the client's retries.
    """
    if batch:
        results = client.add_many(documents)
    else:
        results = []
        for doc in documents:
            try:
                results.append(client.add(doc["text"], doc["id"], title=doc["title"]))
            except EmptyDocumentError as exc:  # this article only
                results.append(exc)
            except ServiceError as exc:
                if exc.status not in (413, 422):  # not this document's fault: stop here
                    raise
                results.append(exc)
    for doc, result in zip(documents, results, strict=True):
        if isinstance(result, NSHashError):
            print(f"  {doc['id']:<16} error: {result}")
            continue
        mark = "repost of" if result.duplicate else "new story"
        print(f"  {doc['id']:<16} {mark:<9} {result.similar_id}")
    print(f"\nHot stories ({len(documents)} articles sent):")
    for group in client.groups(min_size=2, limit=top):
        titles = [m.title or m.doc_id for m in group.members]
        print(f"  #{group.similar_id:<4} {group.size} copies: {titles[0]}")


def main() -> None:
    """Parse the arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", default=HERE / "articles.jsonl", type=Path)
    parser.add_argument("--url", help="a running service (default: start one in-process)")
    parser.add_argument("--api-key", help="the service's NSHASH_API_KEY, if it sets one")
    parser.add_argument("--batch", action="store_true", help="send all articles in one request")
    parser.add_argument("--top", type=int, default=5, help="how many stories to show")
    args = parser.parse_args()
    documents = read_articles(args.file)
    try:
        if args.url:
            with Client(args.url, api_key=args.api_key) as client:
                run(client, documents, args.batch, args.top)
            return
        with local_service() as url, Client(url) as client:
            run(client, documents, args.batch, args.top)
    except ServiceError as exc:
        hint = " (pass the service's key with --api-key)" if exc.status == 401 else ""
        sys.exit(f"Error: the service answered HTTP {exc.status} {exc.code}: {exc.message}{hint}")
    except StoreUnavailableError as exc:  # unreachable, after the client's retries
        sys.exit(f"Error: {exc}")


if __name__ == "__main__":
    main()
