"""A small replica of the Hugging Face Hub's download API, so the real ``hf download`` works offline.

Recipes' support Jobs run ``hf download $MODEL_NAME`` (huggingface_hub's own CLI) in a Python
image. No hub is reachable here, so the kind provider's Python image (``python_image.py``) installs
:func:`run_hf` as ``hf``: it starts this replica on 127.0.0.1 (an ephemeral port, inside the
container, for this one process), points ``HF_ENDPOINT`` at it unless the caller set one, and runs
huggingface_hub's own CLI in the same process. The client then does what it does against the hub
(``GET /api/models/<repo>/revision/<rev>`` for the commit, ``GET /api/models/<repo>/tree/<commit>``
for the files, ``HEAD`` and ``GET /<repo>/resolve/<commit>/<file>`` for each) and lays out
``$HF_HOME/hub/models--<org>--<name>/{blobs,refs,snapshots}`` itself.

What it holds: each directory ``<root>/<org>/<name>/`` is the model repository ``org/name`` at
revision ``main`` (regular files, ETag the git blob id, as the hub serves files outside LFS; the
commit id hashes the listing). A repository it does not hold is answered as the hub answers one
that does not exist (401 without a token, 404 with one, ``X-Error-Code: RepoNotFound``), so the
client raises ``RepositoryNotFoundError`` and ``hf`` exits 1; an unknown revision is
``RevisionNotFound``, an unknown file ``EntryNotFound``. Tokens are not checked (the hub's
accounts are not replicated). Why and what is served: docs/offline-cluster.md, "Support images
and the hub replica".

Runs inside the image with the standard library only (it never imports ``deploy_suite``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, unquote, urlsplit

ROOT = Path("/opt/hub-replica")
LAST_MODIFIED = "2026-01-01T00:00:00.000Z"  # fixed: the replica's content changes only with its image
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def git_blob_oid(data: bytes) -> str:
    """The hub's ETag of a file outside LFS: its git blob id."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int
    oid: str
    source: Path


@dataclass(frozen=True)
class Repo:
    repo_id: str
    commit: str
    files: tuple[RepoFile, ...]

    @classmethod
    def load(cls, repo_id: str, folder: Path) -> Repo:
        files = []
        for p in sorted(q for q in folder.rglob("*") if q.is_file()):
            data = p.read_bytes()
            files.append(RepoFile(p.relative_to(folder).as_posix(), len(data), git_blob_oid(data), p))
        listing = "\n".join(f"{f.path} {f.oid}" for f in files).encode()
        return cls(repo_id, hashlib.sha1(listing, usedforsecurity=False).hexdigest(), tuple(files))

    def file(self, path: str) -> RepoFile | None:
        return next((f for f in self.files if f.path == path), None)

    def info(self) -> dict[str, object]:
        author = self.repo_id.split("/")[0] if "/" in self.repo_id else None
        return {"_id": self.commit[:24], "id": self.repo_id, "modelId": self.repo_id, "author": author,
                "sha": self.commit, "lastModified": LAST_MODIFIED, "createdAt": LAST_MODIFIED, "private": False,
                "gated": False, "disabled": False, "downloads": 0, "likes": 0, "tags": [],
                "library_name": "transformers", "siblings": [{"rfilename": f.path} for f in self.files]}

    def tree(self, prefix: str, recursive: bool) -> list[dict[str, object]]:
        """The entries under ``prefix`` as ``/api/models/<repo>/tree`` lists them (directories too)."""
        base = prefix.strip("/")
        entries: dict[str, dict[str, object]] = {}
        for f in self.files:
            if base and not f.path.startswith(base + "/"):
                continue
            parts = f.path[len(base) + 1 if base else 0:].split("/")
            for depth in range(1, len(parts)):  # the directories on the way
                if recursive or depth == 1:
                    folder = "/".join(filter(None, [base, *parts[:depth]]))
                    entries.setdefault(folder, {"type": "directory", "oid": git_blob_oid(folder.encode()),
                                                "size": 0, "path": folder})
            if recursive or len(parts) == 1:
                entries[f.path] = {"type": "file", "oid": f.oid, "size": f.size, "path": f.path}
        return [entries[k] for k in sorted(entries)]


def load_repos(root: Path) -> dict[str, Repo]:
    """Every ``<root>/<org>/<name>/`` directory as the repository ``org/name``."""
    found: dict[str, Repo] = {}
    if root.is_dir():
        for org in sorted(p for p in root.iterdir() if p.is_dir()):
            for name in sorted(p for p in org.iterdir() if p.is_dir()):
                found[f"{org.name}/{name.name}"] = Repo.load(f"{org.name}/{name.name}", name)
    return found


@dataclass
class Reply:
    """One answer: status, headers, and a body (bytes, or a byte range of a file)."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    file: Path | None = None
    span: tuple[int, int] = (0, 0)  # [start, end) of ``file``

    @classmethod
    def json(cls, status: int, doc: object, headers: Mapping[str, str] | None = None) -> Reply:
        body = json.dumps(doc).encode()
        return cls(status, {"Content-Type": "application/json; charset=utf-8", "Content-Length": str(len(body)),
                            **(headers or {})}, body)

    @classmethod
    def error(cls, status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> Reply:
        return cls.json(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message,
                                                      **(headers or {})})


class Hub:
    """The hub's answers for a set of repositories (pure: no sockets)."""

    def __init__(self, repos: Mapping[str, Repo]) -> None:
        self.repos = dict(repos)

    def answer(self, method: str, raw_path: str, headers: Mapping[str, str]) -> Reply:
        url = urlsplit(raw_path)
        if url.path == "/api/agent-harnesses":  # the client's agent detection: none known here
            return Reply.json(200, {"standardEnvVars": [], "harnesses": {}})
        if url.path.startswith("/api/models/"):
            return self._api(url.path.removeprefix("/api/models/"), parse_qs(url.query), headers)
        if "/resolve/" in url.path:
            repo_id, _, rest = url.path.lstrip("/").partition("/resolve/")
            revision, _, path = rest.partition("/")
            return self._resolve(method, unquote(repo_id), unquote(revision), unquote(path), headers)
        return Reply.error(404, "NotFound", "Sorry, we can't find the page you are looking for.")

    def _repo(self, repo_id: str, revision: str, headers: Mapping[str, str]) -> Repo | Reply:
        repo = self.repos.get(repo_id)
        if repo is None:
            # The hub's answer for a repository that does not exist: 401 to an anonymous client.
            authorized = any(k.lower() == "authorization" for k in headers)
            return Reply.error(404 if authorized else 401, "RepoNotFound", "Repository not found")
        if revision not in ("main", repo.commit):
            return Reply.error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return repo

    def _api(self, rest: str, query: Mapping[str, list[str]], headers: Mapping[str, str]) -> Reply:
        for marker in ("/revision/", "/tree/"):
            if marker in rest:
                repo_id, _, tail = rest.partition(marker)
                revision, _, prefix = tail.partition("/")
                found = self._repo(unquote(repo_id), unquote(revision), headers)
                if isinstance(found, Reply):
                    return found
                if marker == "/revision/":
                    return Reply.json(200, found.info())
                recursive = (query.get("recursive") or ["false"])[0].lower() in ("1", "true")
                return Reply.json(200, found.tree(unquote(prefix), recursive))
        found = self._repo(unquote(rest.rstrip("/")), "main", headers)
        return found if isinstance(found, Reply) else Reply.json(200, found.info())

    def _resolve(self, method: str, repo_id: str, revision: str, path: str, headers: Mapping[str, str]) -> Reply:
        found = self._repo(repo_id, revision, headers)
        if isinstance(found, Reply):
            return found
        commit = {"X-Repo-Commit": found.commit}
        entry = found.file(path)
        if entry is None:
            return Reply.error(404, "EntryNotFound", f"{path} does not exist on \"{revision}\"", commit)
        start, end = 0, entry.size
        status = 200
        wanted = next((v for k, v in headers.items() if k.lower() == "range"), "")
        matched = _RANGE.match(wanted.strip())
        if matched and (matched.group(1) or matched.group(2)):
            start, end = _span(matched.group(1), matched.group(2), entry.size)
            status = 206
            commit["Content-Range"] = f"bytes {start}-{end - 1}/{entry.size}"
        reply = Reply(status, {"Content-Type": "application/octet-stream", "Content-Length": str(end - start),
                               "ETag": f'"{entry.oid}"', "Accept-Ranges": "bytes", **commit})
        if method != "HEAD":
            reply.file, reply.span = entry.source, (start, end)
        return reply


def _span(first: str, last: str, size: int) -> tuple[int, int]:
    if not first:  # bytes=-N: the last N bytes
        return max(0, size - int(last)), size
    return min(int(first), size), min(int(last) + 1, size) if last else size


class _Handler(BaseHTTPRequestHandler):
    server_version = "deploy-suite-hub-replica/1"
    hub: ClassVar[Hub] = Hub({})

    def _serve(self) -> None:
        reply = type(self).hub.answer(self.command, self.path, dict(self.headers.items()))
        self.send_response(reply.status)
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command == "HEAD":
            return
        if reply.file is None:
            self.wfile.write(reply.body)
            return
        with reply.file.open("rb") as f:
            f.seek(reply.span[0])
            self.wfile.write(f.read(reply.span[1] - reply.span[0]))

    do_GET = _serve
    do_HEAD = _serve

    def log_message(self, format: str, *args: object) -> None:
        print(f"hub replica: {format % args}", file=sys.stderr, flush=True)


def serve(root: Path, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """The replica of ``root`` on ``host:port`` (loopback, an ephemeral port by default), in a daemon thread."""
    _Handler.hub = Hub(load_repos(root))
    server = ThreadingHTTPServer((host, port), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="hub-replica").start()
    return server


def run_hf(root: Path = ROOT) -> None:
    """``hf``: huggingface_hub's own CLI, its ``HF_ENDPOINT`` this replica unless the caller set one."""
    if not os.environ.get("HF_ENDPOINT"):
        server = serve(root)
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        os.environ["HF_ENDPOINT"] = endpoint  # read when huggingface_hub is first imported, just below
        held = ", ".join(_Handler.hub.repos) or "none"
        print(f"hub replica (deploy-suite; no hub is reachable): {endpoint} holds {held}", file=sys.stderr,
              flush=True)
    from huggingface_hub.cli.hf import main

    main()  # type: ignore[no-untyped-call]  # huggingface_hub's entry point has no annotations


if __name__ == "__main__":
    run_hf()
