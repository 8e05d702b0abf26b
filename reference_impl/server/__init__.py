"""An OpenAI-compatible HTTP server over the engine (`repro serve`; docs/serving.md)."""
