"""Every per-video stage in the one shape of ``howtocap.engine.stage``: settings in, ``setup`` loads the
models once per worker, ``process`` maps one video's inputs to its tables or an error.

| stage | reads | writes | models |
|---|---|---|---|
| ``subtitles`` | – (files, ``--subtitles``) | subtitles | Whisper (only without subtitles) |
| ``caption`` | subtitles | captions | the LLM (or an HTTP client) |
| ``frames`` | – (the video) | – (the frame-embedding cache) | image–text encoders |
| ``align`` | captions | align_scores | image–text encoders |
| ``framecaps`` | – (the video) | framecaps | image captioners + a scorer |
| ``tdr_frames`` | – (the video, its transcript) | tdr_frames | an image–text encoder |

Stages never import ``howtocap.pipeline``; steps that need every video (the align filter,
merging, the index) are reduce steps there.
"""
