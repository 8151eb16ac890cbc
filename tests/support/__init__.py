"""What the tests and the benchmarks share: the raw LSP client, a real llama-server, the proxies
and the load balancer put in front of it, tiny generated GGUF models, and the texts cut from files
the machine already has (mid-word cases, documents of a given length).

The benchmarks (bench/, a tool run from a checkout) import from here; nothing here imports bench,
and nothing here ships in the wheel.
"""
