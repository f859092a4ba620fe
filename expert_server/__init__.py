"""HuggingGPT's local expert server (the paper's hybrid inference endpoint): Hugging Face
checkpoints from the local cache served in the Hugging Face inference wire format, under a memory
budget. A separate deployable: it imports nothing of ``bot/``, ``adapters/`` or ``pipeline/``, and
its heavy libraries (torch, transformers, diffusers, controlnet-aux) are the ``experts`` extra.

See ``docs/experts.md``; :mod:`expert_server.app` for the HTTP interface.
"""
