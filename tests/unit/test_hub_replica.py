"""The hub replica of the kind provider's Python image (python_files/hub_replica.py): its answers, and the
real huggingface_hub client (the version the image pins) downloading through it into the hub cache layout."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy_suite_offline.kind import python_image
from deploy_suite_offline.kind.python_files import hub_replica

MODEL = "Org/Tiny-Model"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    repo = tmp_path / "hub" / "Org" / "Tiny-Model"
    (repo / "sub").mkdir(parents=True)
    (repo / "config.json").write_text('{"model_type": "llama"}')
    (repo / "tokenizer.json").write_text('{"version": "1.0"}')
    (repo / "sub" / "extra.txt").write_text("0123456789")
    return tmp_path / "hub"


@pytest.fixture
def hub(root: Path) -> hub_replica.Hub:
    return hub_replica.Hub(hub_replica.load_repos(root))


def test_a_file_is_identified_as_the_hub_identifies_files_outside_lfs() -> None:
    # `git hash-object` of "hello\n"
    assert hub_replica.git_blob_oid(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_repo_info_names_the_commit_and_the_files(hub: hub_replica.Hub) -> None:
    reply = hub.answer("GET", f"/api/models/{MODEL}/revision/main", {})
    assert reply.status == 200
    info = json.loads(reply.body)
    assert info["id"] == MODEL and len(info["sha"]) == 40
    assert [s["rfilename"] for s in info["siblings"]] == ["config.json", "sub/extra.txt", "tokenizer.json"]
    assert json.loads(hub.answer("GET", f"/api/models/{MODEL}", {}).body)["sha"] == info["sha"]
    by_commit = hub.answer("GET", f"/api/models/{MODEL}/revision/{info['sha']}", {})
    assert by_commit.status == 200


def test_the_tree_lists_files_and_directories_recursively_or_not(hub: hub_replica.Hub) -> None:
    flat = json.loads(hub.answer("GET", f"/api/models/{MODEL}/tree/main", {}).body)
    assert [(e["type"], e["path"]) for e in flat] == [("file", "config.json"), ("directory", "sub"),
                                                      ("file", "tokenizer.json")]
    deep = json.loads(hub.answer("GET", f"/api/models/{MODEL}/tree/main?recursive=true", {}).body)
    extra = next(e for e in deep if e["path"] == "sub/extra.txt")
    assert extra == {"type": "file", "oid": hub_replica.git_blob_oid(b"0123456789"), "size": 10,
                     "path": "sub/extra.txt"}
    under = json.loads(hub.answer("GET", f"/api/models/{MODEL}/tree/main/sub", {}).body)
    assert [e["path"] for e in under] == ["sub/extra.txt"]


def test_resolve_answers_the_headers_the_client_reads_and_the_bytes(hub: hub_replica.Hub, root: Path) -> None:
    commit = hub.repos[MODEL].commit
    head = hub.answer("HEAD", f"/{MODEL}/resolve/main/sub/extra.txt", {})
    assert head.status == 200 and head.file is None
    assert head.headers["X-Repo-Commit"] == commit
    assert head.headers["ETag"] == f'"{hub_replica.git_blob_oid(b"0123456789")}"'
    assert head.headers["Content-Length"] == "10"
    got = hub.answer("GET", f"/{MODEL}/resolve/{commit}/sub/extra.txt", {})
    assert got.file == root / "Org" / "Tiny-Model" / "sub" / "extra.txt" and got.span == (0, 10)
    part = hub.answer("GET", f"/{MODEL}/resolve/{commit}/sub/extra.txt", {"Range": "bytes=4-"})
    assert part.status == 206 and part.span == (4, 10) and part.headers["Content-Range"] == "bytes 4-9/10"
    assert hub.answer("GET", f"/{MODEL}/resolve/main/sub/extra.txt", {"Range": "bytes=-3"}).span == (7, 10)


def test_what_it_does_not_hold_is_answered_as_the_hub_answers(hub: hub_replica.Hub) -> None:
    anonymous = hub.answer("GET", "/api/models/Nobody/Nothing/revision/main", {})
    assert anonymous.status == 401 and anonymous.headers["X-Error-Code"] == "RepoNotFound"
    with_token = hub.answer("HEAD", "/Nobody/Nothing/resolve/main/config.json", {"Authorization": "Bearer x"})
    assert with_token.status == 404 and with_token.headers["X-Error-Code"] == "RepoNotFound"
    revision = hub.answer("GET", f"/api/models/{MODEL}/revision/v9", {})
    assert revision.status == 404 and revision.headers["X-Error-Code"] == "RevisionNotFound"
    entry = hub.answer("HEAD", f"/{MODEL}/resolve/main/model.safetensors", {})
    assert entry.status == 404 and entry.headers["X-Error-Code"] == "EntryNotFound"
    assert entry.headers["X-Repo-Commit"] == hub.repos[MODEL].commit
    assert hub.answer("GET", "/spaces/x", {}).status == 404


def _hf(root: Path, hf_home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """``hf ARGS`` as the image runs it: hub_replica.run_hf, then huggingface_hub's own CLI."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(hf_home), HF_HUB_DISABLE_UPDATE_CHECK="1", NO_COLOR="1", **extra)
    script = ("import sys; from pathlib import Path; "
              "from deploy_suite_offline.kind.python_files.hub_replica import run_hf; run_hf(Path(sys.argv.pop(1)))")
    return subprocess.run([sys.executable, "-c", script, str(root), *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_the_pinned_client_is_the_one_the_image_installs() -> None:
    assert importlib.metadata.version("huggingface_hub") == python_image.HUB_VERSION


def test_hf_download_lays_out_the_hub_cache_as_the_real_client_does(root: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = _hf(root, home, "download", MODEL, HF_TOKEN="placeholder-not-a-real-token")
    assert done.returncode == 0, done.stderr
    assert f"/{MODEL}/resolve/" in done.stderr  # the replica's request log: the client asked it
    storage = home / "hub" / "models--Org--Tiny-Model"
    commit = (storage / "refs" / "main").read_text()
    assert len(commit) == 40
    snapshot = storage / "snapshots" / commit
    assert str(snapshot) in done.stdout
    for name in ("config.json", "tokenizer.json", "sub/extra.txt"):
        link = snapshot / name
        assert link.is_symlink(), name
        data = (root / "Org" / "Tiny-Model" / name).read_bytes()
        # Each blob is named by the ETag the replica gave, the file's git blob id.
        assert link.resolve() == storage / "blobs" / hub_replica.git_blob_oid(data)
        assert link.read_bytes() == data
    again = _hf(root, home, "download", MODEL)
    assert again.returncode == 0 and str(snapshot) in again.stdout


def test_hf_download_of_a_model_it_does_not_hold_fails_as_against_the_hub(root: Path, tmp_path: Path) -> None:
    done = _hf(root, tmp_path / "home", "download", "Nobody/Nothing")
    assert done.returncode == 1
    assert "Model 'Nobody/Nothing' not found" in done.stderr
    assert not (tmp_path / "home" / "hub" / "models--Nobody--Nothing" / "snapshots").exists()


def test_an_endpoint_the_caller_set_is_kept(root: Path, tmp_path: Path) -> None:
    done = _hf(root, tmp_path / "home", "download", MODEL, HF_ENDPOINT="http://127.0.0.1:9")
    assert done.returncode != 0 and "hub replica" not in done.stderr


def test_the_image_key_moves_with_the_replica_and_the_pins() -> None:
    key = python_image.image_key("deploy-suite/kind-base:x")
    assert key == python_image.image_key("deploy-suite/kind-base:x")
    assert key != python_image.image_key("deploy-suite/kind-base:y")
    assert len(key) == 12 and all(c in "0123456789abcdef" for c in key)  # usable in a tag
