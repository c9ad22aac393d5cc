"""Every example of README.md, run as printed, gives the output the README shows beside it.

How the README shows output, and how it is compared:

* ``python`` blocks: a ``print(...)`` line's trailing ``# comment`` is what it prints; a print
  without one is followed by comment lines that hold its output, wrapped (joined with a
  space). Paths under ``/tmp/`` and ``/var/lib/nshash/`` are moved to a temporary directory.
* ``console`` blocks: ``$ command`` lines and their output (stdout and stderr together).
* ``sh`` blocks: a command (``\\`` continues it), then comment lines with its output; wrapped
  JSON is joined as it is. ``curl`` commands run against ``nshash serve`` on a free port.
  Installing, building images and running this test suite are not run here (:data:`NOT_RUN`).

In expected output, ``...`` stands for any text within a line, and a line that is only ``...``
for any number of lines. Timings (``0.03 s``, ``1,170 docs/s``) are masked on both sides: they
are measurements, not outputs. The README's tables of figures are not examples and are not
checked here.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import time
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.redis_server import free_port

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

#: Shell commands shown but not run by this test, by how they start, with the reason.
NOT_RUN = {
    "pip install": "installs packages",
    "python3 -m pip install": "installs packages",
    "docker": "needs a Docker daemon",
    "python3 -m pytest": "is this test suite",
}

#: Measurements, not outputs: masked in both the README and the actual output.
VOLATILE = (
    (re.compile(r"\b\d+\.\d+ s\b"), "<seconds> s"),
    (re.compile(r"\b[\d,]+ docs/s\b"), "<rate> docs/s"),
)


@dataclass
class Example:
    """One runnable example: where it is, what to run, what it should print."""

    line: int
    code: str
    expected: list[str]
    #: ``lines``: compare line by line; ``joined``: the expected lines are one wrapped output.
    mode: str = "lines"

    def __str__(self) -> str:
        return f"README.md:{self.line}"


def blocks(language: str) -> Iterator[tuple[int, str]]:
    """Yield (line number, body) of each fenced block in *language*."""
    text = README.read_text("utf-8")
    for match in re.finditer(rf"^```{language}\n(.*?)^```", text, re.M | re.S):
        yield text.count("\n", 0, match.start()) + 2, match.group(1)


def mask(text: str) -> str:
    for pattern, replacement in VOLATILE:
        text = pattern.sub(replacement, text)
    return text


def line_pattern(expected: str) -> re.Pattern[str]:
    """A regex for one expected line: ``...`` matches anything, the rest literally."""
    parts = [re.escape(part) for part in mask(expected).split("...")]
    return re.compile(".*?".join(parts), re.S)


def assert_output(example: Example, actual: str) -> None:
    """Check *actual* against the example's expected output (see the module docstring)."""
    if example.mode == "joined":
        want = line_pattern("".join(example.expected))
        assert want.fullmatch(mask(actual.strip())), f"{example}: got {actual!r}"
        return
    got = [line.rstrip() for line in mask(actual).rstrip("\n").split("\n")] if actual else []
    assert match_lines([e.rstrip() for e in example.expected], got), (
        f"{example}: expected\n" + "\n".join(example.expected) + "\ngot\n" + "\n".join(got)
    )


def match_lines(expected: list[str], got: list[str]) -> bool:
    """Whether *got* matches *expected*, a line ``...`` standing for any number of lines."""
    if not expected:
        return not got
    head, rest = expected[0], expected[1:]
    if head.strip() == "...":
        return any(match_lines(rest, got[i:]) for i in range(len(got) + 1))
    return bool(got) and bool(line_pattern(head).fullmatch(got[0])) and match_lines(rest, got[1:])


def localize(code: str, tmp: Path) -> str:
    """Move the examples' absolute paths into *tmp*."""
    return code.replace("/var/lib/nshash/", f"{tmp}/").replace("/tmp/", f"{tmp}/")


# -- python ------------------------------------------------------------------------------


def python_examples() -> list[Example]:
    out = []
    for line, body in blocks("python"):
        expected: list[str] = []
        comments = {}
        for tok in tokenize.generate_tokens(io.StringIO(body).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = (tok.start[1], tok.string[1:].strip())
        lines = body.splitlines()
        for number, text in enumerate(lines, 1):
            if "print(" not in text:
                continue
            column, comment = comments.get(number, (0, ""))
            if column > 0:
                expected.append(comment)
                continue
            wrapped = []
            for follower in range(number + 1, len(lines) + 1):
                column, comment = comments.get(follower, (-1, ""))
                if column != len(lines[follower - 1]) - len(lines[follower - 1].lstrip()):
                    break
                wrapped.append(comment)
            expected.append(" ".join(wrapped))
        out.append(Example(line, body, expected))
    return out


#: The service address the Python client example talks to (a fresh ``nshash serve`` here).
CLIENT_EXAMPLE_SERVICE = "127.0.0.1:8000"


@pytest.mark.parametrize("example", python_examples(), ids=str)
def test_python(example: Example, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A Python example runs and prints what its comments say."""
    code = localize(example.code, tmp_path)
    if CLIENT_EXAMPLE_SERVICE in code:
        code = code.replace(CLIENT_EXAMPLE_SERVICE, request.getfixturevalue("client_service"))
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{example}: {done.stderr}"
    assert_output(example, done.stdout)


# -- console -----------------------------------------------------------------------------


def console_examples() -> list[Example]:
    out = []
    for line, body in blocks("console"):
        current: Example | None = None
        for offset, text in enumerate(body.splitlines()):
            if text.startswith("$ "):
                current = Example(line + offset, text[2:], [])
                out.append(current)
            elif current is not None:
                current.expected.append(text)
    return out


def nshash_command(command: str) -> str:
    """The command with ``nshash`` run by this interpreter (the code under test)."""
    return re.sub(r"(^|&& )nshash ", rf"\1{sys.executable} -m nshash ", command)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the repository's ``example/`` folder, where shell examples run."""
    root = tmp_path_factory.mktemp("readme")
    shutil.copytree(REPO / "example", root / "example")
    return root


@pytest.mark.parametrize("example", console_examples(), ids=str)
def test_console(example: Example, workdir: Path) -> None:
    """A command of a console session prints what the session shows (the sessions run in
    order in one directory, so a later command sees what an earlier one saved)."""
    done = subprocess.run(
        ["bash", "-c", nshash_command(example.code)],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "NSHASH_STORE_URL"},
    )
    assert_output(example, done.stdout)


# -- sh ----------------------------------------------------------------------------------


def sh_examples() -> list[Example]:
    out = []
    for line, body in blocks("sh"):
        lines = body.splitlines()
        i = 0
        while i < len(lines):
            start = i
            command = lines[i]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            i += 1
            expected = []
            while i < len(lines) and lines[i].startswith("#"):
                expected.append(lines[i][1:].strip())
                i += 1
            if command.strip():
                mode = "lines" if "..." in expected else "joined"
                out.append(Example(line + start, command, expected, mode))
    return out


def not_run(command: str) -> str | None:
    for prefix, reason in NOT_RUN.items():
        if command.startswith(prefix):
            return reason
    return None


SH = sh_examples()
CURL = [e for e in SH if e.code.startswith("curl ")]
OTHER = [e for e in SH if not e.code.startswith("curl ")]


def runnable_parts(example: Example) -> list[str]:
    """The ``&&`` parts of a shell example that this module runs (:data:`NOT_RUN` aside)."""
    parts = [p.strip() for p in example.code.split(" #")[0].split("&&")]
    return [p for p in parts if not not_run(p)]


@pytest.mark.parametrize("example", OTHER, ids=str)
def test_sh(example: Example, workdir: Path) -> None:
    """Each other shell command succeeds; the lint commands run in :func:`test_lint_commands`."""
    for part in runnable_parts(example):
        if part.startswith(("python3 -m ruff", "python3 -m mypy")):
            continue
        done = subprocess.run(
            ["bash", "-c", nshash_command(part)],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{example}: {part}: {done.stderr}"
        if example.expected:
            assert_output(example, done.stdout)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``nshash serve`` on a free port with an in-memory store; yields its host:port."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    yield from _serve(tmp_path_factory)


@pytest.fixture(scope="module")
def client_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Another ``nshash serve``, for the Python client example (the curl ones count ids)."""
    yield from _serve(tmp_path_factory)


def _serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("uvicorn")
    import httpx

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NSHASH_")}
    server = subprocess.Popen(
        [sys.executable, "-m", "nshash", "serve", "--store", "memory://", "--port", str(port)],
        cwd=tmp_path_factory.mktemp("service"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and server.poll() is None, "no service"
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.parametrize("example", CURL, ids=str)
def test_curl(example: Example, service: str) -> None:
    """Each curl example, against a fresh service in README order, answers what it shows."""
    done = subprocess.run(
        ["bash", "-c", example.code.replace("localhost:8000", service)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert_output(example, done.stdout)


@pytest.mark.slow
def test_lint_commands() -> None:
    """The Development section's lint and type commands run and pass (tools from the extra)."""
    (command,) = [e.code for e in OTHER if "ruff" in e.code]
    command = command.split(" #")[0].replace("python3 ", f"{sys.executable} ")
    done = subprocess.run(
        ["bash", "-c", command], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
