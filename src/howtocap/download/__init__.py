"""The ``download`` step: remote inputs (http(s), s3, gs, YouTube) into the run's media cache."""
