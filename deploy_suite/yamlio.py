"""The one bounded YAML reader: every handed-off, run-scoped or generated YAML file is parsed here.

Handed-off files come from another agent or a person; a 50 MB file, 10,000-deep nesting (PyYAML's
composer recurses) or an alias bomb must be refused in bounded time and memory, and a duplicate
key (PyYAML silently keeps the last one) must not change what a reviewer reads. Every refusal is
an ``InputError`` naming the input and the fix. This module is a leaf: it imports only
``deploy_suite.errors``.

One file is also written back in place, ``<EXP_ROOT>/manifest.yaml``, which user-interviewer owns:
:func:`edit_mapping_file` changes the keys it is told to through a round-trip parser (ruamel.yaml),
so the file's other keys, comments, quoting and order stay as their author wrote them. The file is
read by the bounded reader first, so the same bounds hold.
"""

from __future__ import annotations

import io
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString
from ruamel.yaml.util import load_yaml_guess_indent

from deploy_suite.errors import InputError

MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (PyYAML silently keeps the last one).

    Only the keys written in the mapping count: a key that overrides one brought in by a merge key
    (``<<: *base`` then ``image: x``) is the YAML merge-key type's purpose (yaml.org/type/merge),
    so duplicates are looked for before the merge is flattened."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _value in node.value:
            if key_node.tag == MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, list | dict):
                continue  # unhashable keys are rejected by the base constructor itself
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# Bounds on a handed-off YAML file, checked before it is parsed or walked: manifests and handoffs
# are a few KB and a few levels deep. A 50 MB file, 10,000-deep nesting (PyYAML's composer
# recurses: RecursionError) or an alias bomb (a few lines that expand to billions of nodes when a
# later check walks them) is refused in bounded time and memory instead.
MAX_YAML_BYTES = 1 << 20
MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 100_000  # counted with every alias expanded


def _expanded_size(node: yaml.Node, memo: dict[int, int], limit: int) -> int:
    """Nodes of the tree once every alias is expanded (shared subtrees counted once each time used)."""
    known = memo.get(id(node))
    if known is not None:
        return known
    size = 1
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            size += _expanded_size(child, memo, limit)
            if size > limit:
                break
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            size += _expanded_size(key, memo, limit) + _expanded_size(value, memo, limit)
            if size > limit:
                break
    memo[id(node)] = size
    return size


def load_yaml_text(text: str, input_name: str, fix: str) -> list[Any]:
    """The non-empty documents of YAML text, with duplicate keys, deep nesting and alias bombs refused."""
    try:
        depth = 0
        for event in yaml.parse(text, Loader=_StrictLoader):  # event stream: iterative, O(1) memory
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    mark = event.start_mark
                    where = f" (at line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
                    raise InputError(input_name, f"YAML nested deeper than {MAX_YAML_DEPTH} levels{where}", fix)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        loader = _StrictLoader(text)  # _StrictLoader is a SafeLoader
        try:
            documents: list[Any] = []
            while loader.check_node():
                node = loader.get_node()
                if node is not None and _expanded_size(node, {}, MAX_YAML_NODES) > MAX_YAML_NODES:
                    raise InputError(input_name, f"YAML document {len(documents) + 1} expands to more than "
                                     f"{MAX_YAML_NODES} nodes through its aliases (an alias bomb?)", fix)
                document = loader.construct_document(node)
                # An empty document (a file ending with ``---``, two markers in a row, a leading one
                # before the first) holds no object: kubectl skips it, and so does every reader here.
                if document is not None:
                    documents.append(document)
            return documents
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(input_name, f"YAML syntax error{where}: {problem}", fix) from exc


def load_yaml_documents(real: Path, input_name: str, fix: str) -> list[Any]:
    """The non-empty documents of a YAML file; a syntax error becomes one line with line and column."""
    try:
        size = real.stat().st_size
    except OSError as exc:
        raise InputError(input_name, f"cannot be read ({exc.strerror})", "check the file permissions") from exc
    if size > MAX_YAML_BYTES:
        raise InputError(input_name, f"is {size} bytes, more than the {MAX_YAML_BYTES} a handed-off YAML file may "
                         "have", fix)
    try:
        text = real.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(input_name, "is not UTF-8 text", fix) from exc
    except OSError as exc:  # a directory, or permissions changed since stat()
        problem = f"cannot be read ({exc.strerror or exc})"
        raise InputError(input_name, problem, "check the path and permissions") from exc
    return load_yaml_text(text, input_name, fix)


def load_one(path: Path, input_name: str | None = None, fix: str = "fix the YAML file") -> Any:
    """The single document of a YAML file (``None`` for an empty file); more than one is refused."""
    documents = load_yaml_documents(path, input_name or str(path), fix)
    if len(documents) > 1:
        raise InputError(input_name or str(path), f"holds {len(documents)} YAML documents, one is expected", fix)
    return documents[0] if documents else None


def load_all(path: Path, input_name: str | None = None, fix: str = "fix the YAML file") -> list[Any]:
    """Every non-empty document of a YAML file (run-scoped copies, generated manifests)."""
    return load_yaml_documents(path, input_name or str(path), fix)


def dump(data: Any) -> str:
    """YAML text as written into run-scoped files (key order kept, block style)."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def dump_all(documents: list[Any]) -> str:
    """Several documents, ``---``-separated, key order kept."""
    return yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False)


def quoted(value: Any) -> Any:
    """``value`` with every string double-quoted when :func:`edit_mapping_file` writes it: the file is
    written as YAML 1.2 but read by YAML 1.1 readers too (PyYAML), which take a plain ``yes`` or
    ``on`` for a boolean."""
    if isinstance(value, str):
        return DoubleQuotedScalarString(value)
    if isinstance(value, dict):
        return CommentedMap((k, quoted(v)) for k, v in value.items())
    if isinstance(value, list):
        return CommentedSeq(quoted(v) for v in value)
    return value


def edit_mapping_file(path: Path, edit: Callable[[MutableMapping[str, Any]], None], input_name: str,
                      fix: str) -> str:
    """The text of a one-mapping YAML file once ``edit`` has changed its mapping in place: what the
    edit leaves alone (keys, comments, quoting, order) is written back as it was. A missing or empty
    file starts an empty mapping; a file holding anything but one mapping is refused, never
    overwritten. Values the edit sets should go through :func:`quoted`."""
    text = ""
    if path.exists():
        documents = load_yaml_documents(path, input_name, fix)  # the bounds, before the round-trip parser
        if len(documents) > 1:
            raise InputError(input_name, f"holds {len(documents)} YAML documents, one mapping is expected", fix)
        if documents and not isinstance(documents[0], dict):
            raise InputError(input_name, f"is a YAML {type(documents[0]).__name__}, a mapping is expected", fix)
        text = path.read_text(encoding="utf-8")
    rt = _round_trip(text)
    data = rt.load(text) if text.strip() else None
    kept_comments = "" if data is not None else text  # a file of comments only: kept above the new keys
    if data is None:
        data = rt.map()
    trailing = _take_trailing_comment(data)
    edit(data)
    _put_trailing_comment(data, trailing)
    out = io.StringIO()
    rt.dump(data, out)
    return (kept_comments.rstrip("\n") + "\n" if kept_comments.strip() else "") + out.getvalue()


def _round_trip(text: str) -> YAML:
    """A round-trip parser that writes as the file's author did: their indentation, ``null`` spelled out."""
    rt = YAML(typ="rt")
    rt.preserve_quotes = True
    rt.width = 4096  # never re-fold a long line of the author's
    if text.strip():
        # ruamel guesses one indent: a block sequence's when the file has one (mappings then keep 2).
        _, indent, sequence_offset = load_yaml_guess_indent(text)
        mapping = indent or 2 if sequence_offset is None else 2
        rt.indent(mapping=mapping, sequence=indent or 2, offset=sequence_offset or 0)
    rt.representer.add_representer(type(None), lambda rep, _none: rep.represent_scalar("tag:yaml.org,2002:null",
                                                                                         "null"))
    return rt


def _last_node(data: Any) -> tuple[Any, Any]:
    """The collection holding the document's last scalar and its key (index), or (None, None)."""
    parent, key = None, None
    while isinstance(data, CommentedMap | CommentedSeq) and len(data):
        parent, key = data, (list(data)[-1] if isinstance(data, CommentedMap) else len(data) - 1)
        data = data[key]
    return parent, key


def _take_trailing_comment(data: Any) -> Any:
    """Detach the comment lines after the document's last value (round-trip parsing hangs them on
    that value), so that a value appended at the end goes above them, not below."""
    parent, key = _last_node(data)
    entry: list[Any] = (parent.ca.items.get(key) if parent is not None else None) or []
    slot = 2 if isinstance(parent, CommentedMap) else 0
    token = entry[slot] if len(entry) > slot else None
    if token is None or not str(token.value).startswith("\n"):
        return None  # none, or an end-of-line comment: it belongs to its value
    entry[slot] = None
    return token


def _put_trailing_comment(data: Any, token: Any) -> None:
    parent, key = _last_node(data)
    if token is None or parent is None:
        return
    slot = 2 if isinstance(parent, CommentedMap) else 0
    entry = parent.ca.items.setdefault(key, [None, None, None, None] if slot == 2 else [None, None])
    if entry[slot] is None:
        entry[slot] = token
