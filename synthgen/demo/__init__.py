"""The CPU demo server (`--launch-server demo`): real SGLang on the CPU with a tiny offline model. install
(the pinned install and the model build), commands (its cache, environment and argv), model (the build
script, run by the demo venv's python), bpe (the tokenizer recipe, shared with the test tokenizers)."""
