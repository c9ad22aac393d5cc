"""HTTP client: send articles to the nshash service and print the hot stories it found.

What a crawler does: post each article as it arrives (``POST /v1/documents``, or many at
once with ``POST /v1/documents/batch``), keep the ``similar_id`` it gets back, and ask for
the largest groups (``GET /v1/groups``). Uses only the standard library on the client side.

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
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


class ServiceError(Exception):
    """The service answered with an error: its status, code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code


class Client:
    """A tiny JSON client of the nshash HTTP API.

    Args:
        url: the service's base URL, such as ``http://127.0.0.1:8000``.
        api_key: the key, when the service sets ``NSHASH_API_KEY``.
    """

    def __init__(self, url: str, api_key: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request and return the decoded JSON answer.

        Raises:
            ServiceError: the service answered 4xx or 5xx (its JSON error, decoded).
        """
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers=self.headers
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            error = json.load(exc).get("error", {})
            raise ServiceError(exc.code, error.get("code", "?"), error.get("message", "")) from None

    def add(self, text: str, doc_id: str | None = None, title: str | None = None) -> Any:
        """Add one document; returns ``{similar_id, duplicate, merged_from, ...}``."""
        return self.call("POST", "/v1/documents", {"text": text, "id": doc_id, "title": title})

    def add_batch(self, documents: list[dict[str, Any]]) -> Any:
        """Add documents in one request; returns one entry per document, in order."""
        return self.call("POST", "/v1/documents/batch", {"documents": documents})

    def groups(self, min_size: int = 2, limit: int = 10) -> Any:
        """The largest groups first."""
        return self.call("GET", f"/v1/groups?min_size={min_size}&limit={limit}")["groups"]


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
    """Send the documents, then print the hot stories."""
    if batch:
        results = client.add_batch(documents)["results"]
        for doc, result in zip(documents, results, strict=True):
            if "error" in result:
                print(f"  {doc['id']:<16} error {result['error']['code']}")
    else:
        for doc in documents:
            try:
                result = client.add(doc["text"], doc["id"], doc["title"])
            except ServiceError as exc:
                if exc.status not in (413, 422):  # not this document's fault: stop here
                    raise
                print(f"  {doc['id']:<16} {exc}")
                continue
            mark = "repost of" if result["duplicate"] else "new story"
            print(f"  {doc['id']:<16} {mark:<9} {result['similar_id']}")
    print(f"\nHot stories ({len(documents)} articles sent):")
    for group in client.groups(min_size=2, limit=top):
        titles = [m["title"] or m["id"] for m in group["members"]]
        print(f"  #{group['similar_id']:<4} {group['size']} copies: {titles[0]}")


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
            run(Client(args.url, args.api_key), documents, args.batch, args.top)
            return
        with local_service() as url:
            run(Client(url), documents, args.batch, args.top)
    except ServiceError as exc:
        hint = " (pass the service's key with --api-key)" if exc.status == 401 else ""
        sys.exit(f"Error: the service answered {exc}{hint}")
    except urllib.error.URLError as exc:
        sys.exit(f"Error: cannot reach {args.url}: {exc.reason}")


if __name__ == "__main__":
    main()
