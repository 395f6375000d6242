"""The ``align`` step (HowToCaption stage 2): ``filter`` (window scores, best offsets, the
global filter's maths), ``config`` (typed settings), ``stage`` (one video's scores), ``run``
(the map over videos, the reference draw, and the global filter as the reduce step),
``report`` (the HTML report)."""
