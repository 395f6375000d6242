"""The ``framecaps`` step (Ventura et al.): ``label`` (captioners + CLIPScore top-K),
``config`` (typed settings), ``stage`` (one video), ``run`` (``howtocap framecaps``)."""
