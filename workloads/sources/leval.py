"""L-Eval records -> (prompt, output) token counts: each instruction over a long input is one request,
prompt = input + instruction, output = the reference answer. Format of L4NLP/LEval: records with
"input" (str), "instructions" (list of str) and "outputs" (list of str)."""
import json
import os
from collections.abc import Iterable

from reference_impl.errors import InputError
from workloads.sources import real
from workloads.sources.hub import hub_reachable
from workloads.tokens import TokenCounter

HUB_DATASET = "L4NLP/LEval"


def lengths_from_records(name: str, records: Iterable, count: TokenCounter) -> real.RealLengths:
    rows = []
    for index, record in enumerate(records):
        if not isinstance(record, dict) or not isinstance(record.get("input"), str):
            continue
        document_len = count(record["input"])
        for k, (instruction, answer) in enumerate(zip(record.get("instructions") or [], record.get("outputs") or [])):
            if isinstance(instruction, str) and isinstance(answer, str) and answer:
                rows.append((f"{index}.{k}", document_len + count(instruction), count(answer)))
    return real.build(name, rows)


def load_file(path: str | os.PathLike, count: TokenCounter) -> real.RealLengths:
    """L-Eval records from a local .jsonl (one per line) or .json (an array) file."""
    return real.load_records_file(
        path, f"leval-file:{os.path.basename(path)}", count, lengths_from_records=lengths_from_records,
        read_jsonl=lambda fp, name: [_parse_line(line, name, n) for n, line in enumerate(fp, start=1) if line.strip()],
        empty_message="no L-Eval record with input, instructions and outputs")


def _parse_line(line: str, path, lineno: int):
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        raise InputError(f"{path}:{lineno}: not valid JSON") from None


def load_hub(count: TokenCounter) -> real.RealLengths | None:
    if not hub_reachable():
        return None
    try:
        import datasets

        records = []
        for config in datasets.get_dataset_config_names(HUB_DATASET):
            records.extend(datasets.load_dataset(HUB_DATASET, config, split="test"))
        return lengths_from_records(f"hub:{HUB_DATASET}", records, count)
    except Exception:  # any hub or format failure falls through to the fitted distribution
        return None
