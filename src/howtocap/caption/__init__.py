"""The ``caption`` step (HowToCaption stage 1), all in one folder: ``blocks`` (ASR in ~200-word
blocks, ``<n>s: text`` lines), ``prompt`` (+ ``templates/``), ``constrain`` (the reply
grammar), ``parse`` (replies to timestamped captions), ``chatter`` and ``filler`` (what is not
a step), ``captioner`` (one video: blocks -> LLM -> captions), ``vlm`` (frames with a block),
``stage``, ``run`` (subtitles then captions over many videos, merge) and ``config``. The models
that answer (llama.cpp, OpenAI-compatible clients, server pools) are ``howtocap.llm``."""
