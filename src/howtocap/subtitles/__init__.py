"""The ``subtitles`` step: a video's narration from its subtitle file, a ``--subtitles``
collection or Whisper, as the ``--asr`` mode says (``policy``); ``stage`` runs it per video.
Its run is part of the caption step's (``caption.run``)."""
