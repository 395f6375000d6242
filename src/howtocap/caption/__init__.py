"""The ``caption`` step (HowToCaption stage 1): ``stage`` (LLM captions of one video's
subtitles), ``run`` (subtitles then captions over many videos, merge), ``config`` (the typed
settings). The model side (blocks, prompt, parse, clients) is ``howtocap.llm``."""
