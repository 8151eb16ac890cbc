"""The in-process backend: the model run by llama-cpp-python in this process. `llama` is the only
module that touches llama_cpp (model, context, decode); `kv` keeps the decoded prompts and rows by
token path (`KvCache`, the engine.backend `Backend`); `cores` sizes the threads; `load` opens
the model and sizes the remembered sequences.
"""
