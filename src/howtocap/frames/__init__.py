"""The ``frames`` step: per-second frame embeddings of every video into the frame cache
(``stage``), for ``align``, ``index`` and ``train`` (``run``: ``howtocap frames``)."""
