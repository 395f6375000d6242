"""The ``caption`` step (HowToCaption stage 1): ASR ``blocks`` -> ``prompt`` (``constrain``: the
reply grammar) -> LLM (``howtocap.llm``) -> ``parse`` -> ``chatter``/``filler``/``imperative``/
``merge``, for one video in ``captioner``, over many in ``stage`` and ``run``."""
