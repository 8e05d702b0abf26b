"""The server's Prometheus metrics: vLLM's names and meanings (docs/design/metrics.md of vLLM) so that dashboards
built for it read ours, every one labelled with `model_name`, plus the pool's own under `infinite_llm:`. One
registry per server (a process may hold several, as the tests do)."""
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# vLLM's buckets for its request latencies (seconds) and token counts
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
               960.0, 1920.0, 7680.0)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)


class ServerMetrics:
    def __init__(self, model_name: str):
        self.registry = r = CollectorRegistry()
        label = ["model_name"]
        self.model_name = model_name

        def gauge(name, doc):
            return Gauge(name, doc, label, registry=r).labels(model_name)

        def counter(name, doc):
            return Counter(name, doc, label, registry=r).labels(model_name)

        def histogram(name, doc, buckets):
            return Histogram(name, doc, label, buckets=buckets, registry=r).labels(model_name)

        self.running = gauge("vllm:num_requests_running", "Requests in the running batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be admitted.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "Fraction of the cluster's rBlocks in use (1 = all).")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens prefilled.")
        self.generation_tokens = counter("vllm:generation_tokens", "Tokens generated.")
        self.success = Counter("vllm:request_success", "Requests finished, by reason.", label + ["finished_reason"],
                               registry=r)
        self.ttft = histogram("vllm:time_to_first_token_seconds", "Arrival to first token.", TTFT_BUCKETS)
        self.itl = histogram("vllm:inter_token_latency_seconds", "Time between a request's tokens.", ITL_BUCKETS)
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "Arrival to last token.", E2E_BUCKETS)
        self.queue_time = histogram("vllm:request_queue_time_seconds", "Arrival to first scheduled.", E2E_BUCKETS)
        self.request_prompt = histogram("vllm:request_prompt_tokens", "Prompt tokens per request.", TOKEN_BUCKETS)
        self.request_generation = histogram("vllm:request_generation_tokens", "Tokens generated per request.",
                                            TOKEN_BUCKETS)
        # the pool's own
        self.lent = gauge("infinite_llm:rblocks_lent", "rBlocks instances hold for requests homed elsewhere.")
        self.borrowed = gauge("infinite_llm:rblocks_borrowed", "rBlocks of requests held by other instances.")
        self.rblocks_used = gauge("infinite_llm:rblocks_used", "rBlocks in use in the cluster.")
        self.remote_attention_bytes = counter(
            "infinite_llm:remote_attention_bytes", "DistAttention traffic of decode steps: per layer and remote "
            "holder of a request's rBlocks, its query out and (out, lse) back (local backend; 0 on Ray).")
        self.gmanager_rounds = counter("infinite_llm:gmanager_rounds", "gManager rounds run.")
        self.steps = counter("infinite_llm:engine_steps", "Engine steps (every instance once).")
        self.aborted = counter("infinite_llm:requests_aborted", "Requests aborted (the client went away).")
        self.rejected = counter("infinite_llm:requests_rejected", "Requests refused with 503 (queue full).")

    def finished(self, reason: str) -> None:
        self.success.labels(self.model_name, reason).inc()
